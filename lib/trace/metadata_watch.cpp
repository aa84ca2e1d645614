#include "trace/metadata_watch.hpp"

#include <chrono>
#include <map>
#include <mutex>

namespace retro {

namespace {

using Clock = std::chrono::steady_clock;

struct Entry {
    std::string path;
    Clock::time_point since;
};

struct Registry {
    std::mutex mu;
    unsigned long long next_id = 0;
    std::map<unsigned long long, Entry> reads;  ///< by id; ids grow, so the first entry is the oldest
};

Registry& registry() {
    static Registry r;
    return r;
}

}  // namespace

std::optional<MetadataRead> longest_metadata_read() {
    auto& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    if (r.reads.empty()) return std::nullopt;
    const Entry& e = r.reads.begin()->second;
    return MetadataRead{e.path, std::chrono::duration<double>(Clock::now() - e.since).count()};
}

MetadataReadScope::MetadataReadScope(const std::string& path) {
    auto& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    id_ = r.next_id++;
    r.reads.emplace(id_, Entry{path, Clock::now()});
}

MetadataReadScope::~MetadataReadScope() {
    auto& r = registry();
    std::lock_guard<std::mutex> lk(r.mu);
    r.reads.erase(id_);
}

}  // namespace retro
