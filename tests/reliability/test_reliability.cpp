// Reliability of `retro-bench run` against what happens to real sweeps (issue 16): concurrent runs into
// one results directory, kill -9 and SIGTERM mid-run, a trace replaced under --resume, a killed synth, a
// stop request during trace generation, a corrupt manifest, damaged part files (issue 43). Each test
// asserts that nothing is lost or mixed. Tiny synthetic traces: the whole suite runs in seconds
// (ctest -L reliability).
#include "../cli/cli_harness.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "trace/h5util.hpp"
#include "trace/reader.hpp"

namespace {

using namespace retro::test;

/// Gives the trace `path` the source attribute of `like`: other content under the same metadata, as a
/// model re-dumped with another prompt under one name (the run ids, keyed by metadata, stay the same).
void copy_source(const std::string& like, const std::string& path) {
    const std::string source = retro::TraceReader(like).info().source;
    retro::h5::Lock lk;
    retro::h5::Hid f(H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    ASSERT_TRUE(f.valid());
    ASSERT_GE(H5Adelete(f, "source"), 0);
    retro::h5::write_attr_string(f, "source", source);
}

class Reliability : public CliDir {
  protected:
    json config(const std::string& name, const std::string& trace) {
        return json::parse(R"({"name": ")" + name + R"(", "traces": [")" + trace + R"("],
          "metrics": {"recall_k": [10]},
          "methods": [{"name": "full"}, {"name": "oracle_topk", "params": {"k": [10, 50]}},
                      {"name": "streaming", "params": {"sink": 4, "window": 16}}]})");
    }
    // A run slow enough to be caught in flight: one thread over 6 heads of a 20K-token trace.
    void slow_setup(const std::string& name) {
        make_trace("big.h5", 20000, 16);
        write_config("c.json", config(name, "big.h5"));
    }
    static int count_parts(const std::string& dir) {
        int n = 0;
        if (!fs::exists(dir + "/parts")) return 0;
        for (auto& e : fs::recursive_directory_iterator(dir + "/parts"))
            if (e.is_regular_file() && e.path().extension() == ".json") ++n;
        return n;
    }
    static json manifest(const std::string& dir) { return json::parse(slurp(dir + "/manifest.json")); }
    static bool running(const std::string& dir) {
        try {
            return fs::exists(dir + "/manifest.json") && manifest(dir)["status"] == "running";
        } catch (...) {
            return false;
        }
    }
    // Metric means of every record, keyed by run id: what "identical results" compares.
    static std::map<std::string, json> means(const std::string& dir) {
        std::map<std::string, json> m;
        for (const auto& r : read_jsonl(dir + "/runs.jsonl")) {
            json x = json::object();
            for (auto it = r["metrics"].begin(); it != r["metrics"].end(); ++it)
                if (!std::string(it.key()).ends_with("_us") && it.key() != "build_ms") x[it.key()] = (*it)["mean"];
            m[r["run_id"]] = x;
        }
        return m;
    }
};

// A second run on a directory in use is refused, naming the holder's PID and host; --force from it
// deletes nothing; the first run completes with every record and part (issue 16 #2).
TEST_F(Reliability, ConcurrentRunIsRefusedAndTheFirstLosesNothing) {
    slow_setup("conc");
    Child a = Child::start({"run", "c.json", "--threads", "1", "-q"}, "a.log");
    ASSERT_TRUE(wait_for([] { return running("results/conc"); })) << slurp("a.log");
    // Holding the first run stopped (its lock stays held) makes the race deterministic: a fast machine
    // must not let it finish before the second run tries.
    ASSERT_EQ(kill(a.pid, SIGSTOP), 0);
    for (const char* flags : {"", " --force", " --resume"}) {
        const auto r = sh(bin() + " run c.json" + flags);
        EXPECT_EQ(r.code, 2) << flags << ": " << r.out;
        EXPECT_NE(r.out.find("results/conc is in use by PID " + std::to_string(a.pid) + " on host "), std::string::npos)
            << flags << ": " << r.out;
    }
    ASSERT_EQ(kill(a.pid, SIGCONT), 0);
    ASSERT_EQ(a.wait(), 0) << slurp("a.log");
    EXPECT_EQ(manifest("results/conc")["status"], "complete");
    EXPECT_EQ(read_jsonl("results/conc/runs.jsonl").size(), 4u);
    EXPECT_EQ(count_parts("results/conc"), 4 * 2 * 3);
    EXPECT_EQ(manifest("results/conc")["sessions"].size(), 1u) << "a refused run must not touch the manifest";
}

// --wait-lock: the second run waits for the first, then resumes with nothing left to do.
TEST_F(Reliability, WaitLockWaitsForTheHolderThenResumes) {
    slow_setup("wait");
    Child a = Child::start({"run", "c.json", "--threads", "1", "-q"}, "a.log");
    ASSERT_TRUE(wait_for([] { return running("results/wait"); })) << slurp("a.log");
    ASSERT_EQ(kill(a.pid, SIGSTOP), 0);  // held mid-run (lock kept): b must find it busy, however fast a is
    Child b = Child::start({"run", "c.json", "--resume", "--wait-lock", "-q"}, "b.log");
    const bool waited =
        wait_for([] { return slurp("b.log").find("waiting for results/wait") != std::string::npos; });
    ASSERT_EQ(kill(a.pid, SIGCONT), 0);
    ASSERT_TRUE(waited) << slurp("b.log");
    EXPECT_EQ(a.wait(), 0) << slurp("a.log");
    EXPECT_EQ(b.wait(), 0) << slurp("b.log");
    const json m = manifest("results/wait");
    ASSERT_EQ(m["sessions"].size(), 2u);
    EXPECT_EQ(m["sessions"][0]["status"], "complete");
    EXPECT_EQ(m["sessions"][1]["status"], "complete");
    EXPECT_EQ(m["sessions"][1]["jobs"], 0) << "the waiting run found every head done";
    EXPECT_EQ(read_jsonl("results/wait/runs.jsonl").size(), 4u);
}

// kill -9 mid-run: the next run marks the dead session stale (the lock proves its process gone) and the
// resumed results equal a clean run's (issue 16 #2, #7).
TEST_F(Reliability, KillNineThenResumeGivesIdenticalResultsAndMarksTheSessionStale) {
    slow_setup("killed");
    Child a = Child::start({"run", "c.json", "--threads", "1", "-q"}, "a.log");
    ASSERT_TRUE(wait_for([] { return count_parts("results/killed") >= 1; })) << slurp("a.log");
    kill(a.pid, SIGKILL);
    a.wait();
    ASSERT_EQ(manifest("results/killed")["status"], "running") << "the kill must land mid-run";
    ASSERT_LT(count_parts("results/killed"), 4 * 2 * 3);
    auto r = sh(bin() + " run c.json --resume -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("ended without finishing (killed?); marked stale"), std::string::npos) << r.out;
    const json m = manifest("results/killed");
    EXPECT_EQ(m["sessions"][0]["status"], "stale");
    EXPECT_EQ(m["sessions"][1]["status"], "complete");
    json c = config("clean", "big.h5");
    write_config("c2.json", c);
    r = sh(bin() + " run c2.json -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(means("results/killed") == means("results/clean"));
}

// A trace replaced at the same path by another with the same metadata (so the same run ids) and other
// content is refused under --resume, naming the trace and both fingerprints; the parts on disk stay
// untouched; the original trace resumes (issue 16 #3).
TEST_F(Reliability, ResumeOntoAChangedTraceIsRefused) {
    make_trace("t.h5", 600, 6, 3);
    fs::copy_file("t.h5", "original.h5");
    write_config("c.json", config("changed", "t.h5"));
    auto r = sh(bin() + " run c.json -q");
    ASSERT_EQ(r.code, 0) << r.out;
    const std::string fp = manifest("results/changed")["traces"][0]["fingerprint"];
    ASSERT_EQ(fp.rfind("v1-", 0), 0u) << fp;
    const auto before = means("results/changed");
    fs::remove_all("results/changed/runs");  // something left to do
    make_trace("other.h5", 600, 6, 4);       // same shape, other content ...
    copy_source("t.h5", "other.h5");         // ... and the same metadata
    fs::rename("other.h5", "t.h5");
    r = sh(bin() + " run c.json --resume -q");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("t.h5 is not the trace the results in results/changed were computed from"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("has trace fingerprint " + fp + ", the file now has v1-"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists("results/changed/runs")) << "a refused resume must write nothing";
    fs::rename("original.h5", "t.h5");  // the original again: the same fingerprint, resume goes on
    r = sh(bin() + " run c.json --resume -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(means("results/changed") == before);
}

// SIGTERM (kill, a scheduler's time limit) stops like Ctrl-C: exit 143, manifest "interrupted", a
// resume hint that names the results root, and the resumed results are complete (issue 16 #7).
TEST_F(Reliability, SigtermInterruptsCleanlyAndResumes) {
    slow_setup("term");
    Child a = Child::start({"run", "c.json", "--threads", "1", "--results", "out"}, "a.log");
    ASSERT_TRUE(wait_for([] { return count_parts("out/term") >= 1; })) << slurp("a.log");
    kill(a.pid, SIGTERM);
    EXPECT_EQ(a.wait(), 143) << slurp("a.log");
    const json m = manifest("out/term");
    EXPECT_EQ(m["status"], "interrupted");
    EXPECT_EQ(m["sessions"][0]["status"], "interrupted");
    EXPECT_EQ(m["sessions"][0]["command"], "retro-bench run c.json --results out --threads 1");
    EXPECT_NE(slurp("a.log").find("continue with: retro-bench run c.json --resume --results out"), std::string::npos)
        << slurp("a.log");
    const auto r = sh(bin() + " run c.json --resume --results out -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(read_jsonl("out/term/runs.jsonl").size(), 4u);
    EXPECT_EQ(manifest("out/term")["sessions"][1]["command"], "retro-bench run c.json --results out --resume -q");
}

// A synth killed hard leaves its temp file; the next writer of that path removes it (its owner is gone)
// (issue 16 #7).
TEST_F(Reliability, KilledSynthLeavesNoOrphanTempFile) {
    Child s = Child::start({"synth", "t.h5", "--preset", "smollm2", "--layers", "8", "--prompt-len", "30000",
                            "--steps", "8"},
                           "s.log");
    const auto temps = [] {
        int n = 0;
        for (auto& e : fs::directory_iterator("."))
            if (e.path().filename().string().rfind("t.h5.tmp-", 0) == 0) ++n;
        return n;
    };
    ASSERT_TRUE(wait_for([&] { return temps() > 0; })) << slurp("s.log");
    kill(s.pid, SIGKILL);
    s.wait();
    ASSERT_EQ(temps(), 1);
    ASSERT_FALSE(fs::exists("t.h5"));
    make_trace("t.h5", 300, 4);
    EXPECT_EQ(temps(), 0) << "the killed synth's temp file must be cleaned";
    EXPECT_TRUE(fs::exists("t.h5"));
}

// Ctrl-C while a run generates its synthetic trace stops the generation (between layers), leaves no
// trace and no temp file, and exits 130 (issue 16 #7).
TEST_F(Reliability, StopDuringTraceGenerationIsPromptAndLeavesNothing) {
    write_config("c.json", json::parse(R"({"name": "gen", "traces": [{"path": "g.h5", "synth":
        {"preset": "smollm2", "num_layers": 30, "prompt_len": 20000, "decode_steps": 8}}],
        "methods": [{"name": "full"}]})"));
    Child a = Child::start({"run", "c.json"}, "a.log");
    ASSERT_TRUE(wait_for([] { return slurp("a.log").find("generating synthetic trace g.h5") != std::string::npos; }))
        << slurp("a.log");
    kill(a.pid, SIGINT);
    EXPECT_EQ(a.wait(), 130) << slurp("a.log");
    EXPECT_NE(slurp("a.log").find("generation of g.h5 stopped at layer"), std::string::npos) << slurp("a.log");
    EXPECT_FALSE(fs::exists("g.h5"));
    for (auto& e : fs::directory_iterator(".")) EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos);
}

// A corrupt manifest is kept as manifest.json.corrupt-<time>, said so, and replaced (issue 16 #7).
TEST_F(Reliability, CorruptManifestIsKeptAsideAndReported) {
    make_trace("t.h5", 600, 6);
    write_config("c.json", config("corrupt", "t.h5"));
    auto r = sh(bin() + " run c.json -q");
    ASSERT_EQ(r.code, 0) << r.out;
    std::ofstream("results/corrupt/manifest.json") << "{\"name\": \"corrupt\", \"sessions\": [";
    r = sh(bin() + " run c.json --resume -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("results/corrupt/manifest.json is corrupt"), std::string::npos) << r.out;
    std::string kept;
    for (auto& e : fs::directory_iterator("results/corrupt"))
        if (e.path().filename().string().rfind("manifest.json.corrupt-", 0) == 0) kept = e.path().string();
    ASSERT_FALSE(kept.empty());
    EXPECT_NE(r.out.find("kept as " + kept), std::string::npos) << r.out;
    EXPECT_EQ(slurp(kept), "{\"name\": \"corrupt\", \"sessions\": [");
    EXPECT_EQ(manifest("results/corrupt")["status"], "complete");
}

// A number beyond a double in one config is a clear error naming the file and key, and validate goes on
// to the next file (issue 16 #7).
TEST_F(Reliability, OutOfRangeNumberIsAConfigErrorAndValidateGoesOn) {
    make_trace("t.h5", 300, 4);
    write_config("good.json", config("good", "t.h5"));
    std::ofstream("bad.json") << R"({"name": "bad", "traces": ["t.h5"],
        "methods": [{"name": "oracle_topk", "params": {"k": [10, 1e400]}}]})";
    const auto r = sh(bin() + " validate bad.json good.json");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("bad.json: INVALID: bad.json: methods[0].params.k[1]: number out of range"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("good.json: OK config 'good'"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

/// The part files of results directory `dir`, relative paths sorted ("parts/<run_id>/L<l>_H<h>.json").
std::vector<std::string> part_files(const std::string& dir) {
    std::vector<std::string> v;
    for (auto& e : fs::recursive_directory_iterator(dir + "/parts"))
        if (e.is_regular_file() && e.path().extension() == ".json") v.push_back(fs::relative(e.path(), dir).string());
    std::sort(v.begin(), v.end());
    return v;
}

/// The lines of `out` that contain `what`.
std::vector<std::string> lines_with(const std::string& out, const std::string& what) {
    std::vector<std::string> v;
    std::istringstream in(out);
    for (std::string line; std::getline(in, line);)
        if (line.find(what) != std::string::npos) v.push_back(line);
    return v;
}

/// Damages three parts of `dir` the ways a disk fault, an interrupted copy and a hand copy do: `cut` to its
/// first 100 bytes, `emptied`, and `foreign` replaced by a copy of `donor` (a whole part of another unit).
void damage_three(const std::string& dir, const std::string& cut, const std::string& emptied,
                  const std::string& foreign, const std::string& donor) {
    fs::resize_file(dir + "/" + cut, 100);
    fs::resize_file(dir + "/" + emptied, 0);
    fs::copy_file(dir + "/" + donor, dir + "/" + foreign, fs::copy_options::overwrite_existing);
}

// Damaged parts (issue 43 #3): a part cut short, an empty one and another unit's copy are listed by
// `validate --results` (exit 2, nothing moved), then `run --resume` reports each in one line, moves it
// aside to NAME.damaged (NAME.damaged.1 when that is taken) and recomputes its unit alone: the records
// equal the undamaged run's, and a second validate finds nothing.
TEST_F(Reliability, DamagedPartsAreListedMovedAsideAndRecomputed) {
    make_trace("t.h5", 600, 6);
    write_config("c.json", config("dmg", "t.h5"));
    auto r = sh(bin() + " run c.json -q");
    ASSERT_EQ(r.code, 0) << r.out;
    const auto before = means("results/dmg");
    const auto files = part_files("results/dmg");
    ASSERT_EQ(files.size(), 4u * 2 * 3);
    r = sh(bin() + " validate --results results/dmg");
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("results/dmg: OK results: 24 part file(s) checked (open-loop), none damaged"), std::string::npos)
        << r.out;

    // units of three runs (L1_H2 as in issue 43); the foreign part is a whole part of another run's other head
    const std::string cut = files[5], emptied = files[6], foreign = files[13], donor = files[0];
    damage_three("results/dmg", cut, emptied, foreign, donor);
    const std::map<std::string, std::string> what = {
        {cut, "damaged (truncated JSON (ends after 100 bytes, inside a value))"},
        {emptied, "damaged (empty file)"},
        {foreign, "damaged (another unit's part: it holds run "}};
    r = sh(bin() + " validate --results results/dmg");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(lines_with(r.out, ": damaged (").size(), 3u) << r.out;
    for (const auto& [file, why] : what)
        EXPECT_NE(r.out.find("results/dmg/" + file + ": " + why), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("24 part file(s) checked (open-loop), 3 damaged"), std::string::npos) << r.out;
    EXPECT_EQ(part_files("results/dmg"), files) << "validate must move nothing";

    r = sh(bin() + " run c.json --resume -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << r.out;
    EXPECT_EQ(lines_with(r.out, ": damaged (").size(), 3u) << r.out;
    for (const auto& [file, why] : what) {
        const std::string path = "results/dmg/" + file;
        const auto line = lines_with(r.out, path + ": " + why);
        ASSERT_EQ(line.size(), 1u) << r.out;
        EXPECT_NE(line[0].find("; moved to " + path + ".damaged, its unit will be recomputed"), std::string::npos) << line[0];
        EXPECT_TRUE(fs::exists(path + ".damaged")) << path;
        EXPECT_NO_THROW(json::parse(slurp(path))) << path << " recomputed";
    }
    EXPECT_EQ(fs::file_size("results/dmg/" + cut + ".damaged"), 100u) << "the damaged file is kept as it was";
    EXPECT_EQ(fs::file_size("results/dmg/" + emptied + ".damaged"), 0u);
    EXPECT_EQ(slurp("results/dmg/" + foreign + ".damaged"), slurp("results/dmg/" + donor));
    EXPECT_EQ(manifest("results/dmg")["sessions"][1]["jobs"], 3) << "only the three damaged units are recomputed";
    EXPECT_TRUE(means("results/dmg") == before);
    r = sh(bin() + " validate --results results/dmg");
    EXPECT_EQ(r.code, 0) << r.out;

    // damaged again: the earlier damaged copy is kept, this one goes to NAME.damaged.1
    fs::resize_file("results/dmg/" + cut, 100);
    r = sh(bin() + " run c.json --resume -q");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("; moved to results/dmg/" + cut + ".damaged.1, its unit"), std::string::npos) << r.out;
    EXPECT_EQ(fs::file_size("results/dmg/" + cut + ".damaged"), 100u);
    EXPECT_TRUE(means("results/dmg") == before);
}

// A sharded sweep: `merge` names a damaged part (not a parser's message) and the shard that owns it; a
// shard's --resume moves aside only the damaged parts of its own units; the last shard's resume merges
// results equal to the undamaged sweep's.
TEST_F(Reliability, ShardResumeMovesAsideOnlyItsOwnDamagedParts) {
    make_trace("t.h5", 600, 6);
    write_config("c.json", config("sh", "t.h5"));
    for (const char* s : {"0/2", "1/2"}) {
        const auto r = sh(bin() + " run c.json -q --shard " + s);
        ASSERT_EQ(r.code, 0) << r.out;
    }
    const auto before = means("results/sh");
    std::map<std::string, std::string> of_shard;  // shard -> one of its parts (each part records its shard)
    for (const auto& f : part_files("results/sh"))
        of_shard.emplace(json::parse(slurp("results/sh/" + f))["origin"]["shard"].get<std::string>(), f);
    ASSERT_EQ(of_shard.size(), 2u);
    const std::string p0 = "results/sh/" + of_shard["0/2"], p1 = "results/sh/" + of_shard["1/2"];
    fs::resize_file(p0, 100);
    fs::resize_file(p1, 0);
    auto r = sh(bin() + " merge results/sh");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("2 of 24 part files are damaged: " + of_shard["0/2"] +
                         " (truncated JSON (ends after 100 bytes, inside a value); shard 0/2); " + of_shard["1/2"] +
                         " (empty file; shard 1/2); rerun shards 0/2, 1/2"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("json.exception"), std::string::npos) << r.out;

    r = sh(bin() + " run c.json -q --shard 0/2 --resume");
    EXPECT_EQ(r.code, 2) << "the merge still finds shard 1's damaged part: " << r.out;
    EXPECT_EQ(lines_with(r.out, ": damaged (truncated JSON").size(), 1u) << r.out;
    EXPECT_TRUE(fs::exists(p0 + ".damaged"));
    EXPECT_FALSE(fs::exists(p1 + ".damaged")) << "shard 0 must not touch shard 1's part";
    EXPECT_EQ(fs::file_size(p1), 0u);
    EXPECT_NE(r.out.find("1 of 24 part files are damaged: " + of_shard["1/2"] + " (empty file; shard 1/2); rerun shard 1/2"),
              std::string::npos) << r.out;

    r = sh(bin() + " run c.json -q --shard 1/2 --resume");
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find(p1 + ": damaged (empty file); moved to " + p1 + ".damaged"), std::string::npos) << r.out;
    EXPECT_TRUE(means("results/sh") == before);
}

}  // namespace

// A closed-loop run is retro-bench waiting for its Python script: SIGTERM or SIGHUP to retro-bench (a
// shell's kill, a wrapper's timeout) reaches the script, which stops as it chooses, and retro-bench exits
// with the script's code after it — no script left running on, orphaned, writing to the results. The
// stand-in interpreter (RETRO_CLOSED_LOOP_PYTHON) records its PID and the signal, and exits 7.
TEST_F(Reliability, StopSignalsToAClosedLoopRunReachItsScript) {
    {
        std::ofstream f("fake-python.sh");
        f << "#!/bin/sh\necho $$ > script.pid\ntrap 'echo stopped > script.got; exit 7' TERM HUP\n"
             "while :; do sleep 0.05; done\n";
    }
    fs::permissions("fake-python.sh", fs::perms::owner_all);
    write_config("cl.json", json::parse(R"({"name": "cl", "experiment": "closed-loop", "model": "tiny-random-llama",
                                           "methods": []})"));
    for (const int sig : {SIGTERM, SIGHUP}) {
        fs::remove("script.pid");
        fs::remove("script.got");
        setenv("RETRO_CLOSED_LOOP_PYTHON", (dir_ / "fake-python.sh").c_str(), 1);
        // the signal at its default in retro-bench, whatever this test process inherited (nohup: SIGHUP
        // ignored, which retro-bench leaves ignored)
        const sighandler_t before = signal(sig, SIG_DFL);
        Child a = Child::start({"run", "cl.json", "--results", "out"}, "a.log");
        signal(sig, before);
        unsetenv("RETRO_CLOSED_LOOP_PYTHON");
        ASSERT_TRUE(wait_for([] { return fs::exists("script.pid") && fs::file_size("script.pid") > 0; }, 30))
            << slurp("a.log");
        const pid_t script = (pid_t)std::stol(slurp("script.pid"));
        kill(a.pid, sig);
        int st = 0;
        const bool ended = wait_for([&] { return waitpid(a.pid, &st, WNOHANG) == a.pid; }, 30);
        if (ended) a.pid = -1;  // reaped (else the Child's destructor kills it)
        const bool script_alive = kill(script, 0) == 0;
        if (script_alive) kill(script, SIGKILL);
        ASSERT_TRUE(ended) << "signal " << sig << ": retro-bench still running 30 s later";
        const int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        EXPECT_EQ(code, 7) << "signal " << sig << ": retro-bench ended before its script (" << slurp("a.log") << ")";
        EXPECT_TRUE(fs::exists("script.got")) << "signal " << sig << " did not reach the script";
        EXPECT_FALSE(script_alive) << "signal " << sig << ": the script outlived retro-bench";
    }
}
