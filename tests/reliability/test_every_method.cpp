// Every registered method through the runner (issue 42 #2's conformance, the run level): a sweep of all of
// them at their defaults (shrunk only where a default does not fit the tiny trace) gives the same records
// run once, run as two shards into one directory (the last shard merges), and resumed after a kill -9
// that left some heads undone and after parts were removed; the records' metrics are the harness's, so
// the three must agree to the digit, timings aside. A method added to the registry is covered with no
// edit here; so are the Python example methods (examples/methods/, on retro_bench.Method) where this
// retro-bench runs Python methods (not the sanitizer build).
#include "../cli/cli_harness.hpp"

#include <signal.h>

#include <map>

#include "core/host.hpp"
#include "methods/params.hpp"

namespace {

using namespace retro::test;

/// The Python example methods, when this retro-bench loads Python methods (list-methods --py succeeds).
const std::vector<std::string>& python_examples() {
    static const std::vector<std::string> names = [] {  // asked once: it starts retro-bench's interpreter
        const std::string ex = std::string(retro::source_dir()) + "/examples/methods/";
        if (sh(bin() + " list-methods --py " + ex + "streaming.py").code != 0) return std::vector<std::string>{};
        return std::vector<std::string>{"py:" + ex + "streaming.py:StreamingLLM", "py:" + ex + "quest.py:QuestPages"};
    }();
    return names;
}

json every_method_config(const std::string& name) {
    static const std::map<std::string, json> small = {  // defaults a 600-token trace with 16 prefill queries cannot take
        {"ctkvr", {{"C", 16}}},
        {"wave", {{"segment", 256}, {"update_segment", 64}}},
        {"faiss_ivf", {{"nlist", 16}}},
    };
    json methods = json::array();
    for (const retro::MethodInfo& m : retro::method_registry()) {
        json entry = {{"name", m.name}};
        if (const auto it = small.find(m.name); it != small.end()) entry["params"] = it->second;
        methods.push_back(entry);
    }
    for (const std::string& py : python_examples())  // quest's 2048-token default would attend everything here
        methods.push_back(py.ends_with(":QuestPages") ? json{{"name", py}, {"params", {{"k", 64}}}} : json{{"name", py}});
    return {{"name", name}, {"traces", {"t.h5"}}, {"threads", 1}, {"metrics", {{"recall_k", {10}}}},
            {"methods", methods}};
}

/// Every record's metric means, by run id, timings aside.
std::map<std::string, json> untimed_means(const std::string& dir) {
    std::map<std::string, json> out;
    for (const json& r : read_jsonl(dir + "/runs.jsonl")) {
        json m = json::object();
        for (auto it = r["metrics"].begin(); it != r["metrics"].end(); ++it)
            if (!std::string(it.key()).ends_with("_us") && it.key() != "build_ms") m[it.key()] = (*it)["mean"];
        out[r["run_id"].get<std::string>()] = m;
    }
    return out;
}

class EveryMethod : public CliDir {};

TEST_F(EveryMethod, OneRunTwoShardsAndAResumedRunGiveTheSameRecords) {
    make_trace("t.h5");
    write_config("one.json", every_method_config("same"));
    auto r = sh(bin() + " run one.json --results one -q");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto want = untimed_means("one/same");
    ASSERT_EQ(want.size(), retro::method_registry().size() + python_examples().size());

    for (const char* s : {"0/2", "1/2"}) {  // the second shard finds every part present and merges
        r = sh(bin() + " run one.json --results sharded -q --shard " + s);
        ASSERT_EQ(r.code, 0) << s << ": " << r.out;
    }
    EXPECT_EQ(untimed_means("sharded/same"), want) << "two shards merged differ from one run";

    // killed mid-run (kill -9: nothing is passed on), some parts then lost, resumed to the end
    Child c = Child::start({"run", "one.json", "--results", "resumed", "-q"}, "k.log");
    ASSERT_TRUE(wait_for([] { return fs::exists("resumed/same/parts"); })) << slurp("k.log");
    ASSERT_EQ(kill(c.pid, SIGKILL), 0);
    c.wait();
    int removed = 0;
    if (fs::exists("resumed/same/parts"))
        for (auto& e : fs::recursive_directory_iterator("resumed/same/parts"))
            if (e.is_regular_file() && e.path().extension() == ".json" && removed++ % 3 == 0) fs::remove(e.path());
    r = sh(bin() + " run one.json --results resumed -q --resume");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(untimed_means("resumed/same"), want) << "a resumed run differs from one run";
}

}  // namespace
