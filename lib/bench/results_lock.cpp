#include "bench/results_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/fs.hpp"
#include "core/host.hpp"
#include "core/temp_files.hpp"

namespace retro {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr const char* kMainLock = ".lock";
/// The closed loop's shards serialize their updates of manifest.json on it (closedloop/results.py).
constexpr const char* kManifestLock = ".lock-manifest";

/// ".lock-shard-I-of-N", ".lock-shard-<part>" or ".lock-shard-I-of-N-<part>" (ResultsLockRequest).
std::string shard_lock_name(const ResultsLockRequest& req) {
    std::string name = ".lock-shard-";
    if (req.shard_count > 0) name += std::to_string(req.shard_index) + "-of-" + std::to_string(req.shard_count);
    if (!req.part.empty()) name += (req.shard_count > 0 ? "-" : "") + req.part;
    return name;
}

int open_lock_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw Error("cannot open lock file " + path + ": " + std::strerror(errno));
    return fd;
}

/// flock without blocking, retried for `settle_ms` (ResultsLockRequest::settle_ms). Returns false when
/// the lock stays held.
bool try_flock(int fd, int op, const std::string& path, int settle_ms) {
    for (int waited = 0;; waited += 20) {
        if (::flock(fd, op | LOCK_NB) == 0) return true;
        if (errno == EINTR) continue;
        if (errno != EWOULDBLOCK) throw Error("cannot lock " + path + ": " + std::strerror(errno));
        if (waited >= settle_ms) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

void blocking_flock(int fd, int op, const std::string& path) {
    while (::flock(fd, op) != 0)
        if (errno != EINTR) throw Error("cannot lock " + path + ": " + std::strerror(errno));
}

/// True when some process holds an exclusive flock on `path` (probed with a shared non-blocking lock).
bool held_exclusively(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;  // no such file: nobody holds it
    const bool held = ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    ::close(fd);  // releases the probe's lock, if it got one
    return held;
}

LockHolder read_holder(const std::string& path) {
    try {
        const std::string text = read_file(path);
        if (!text.empty()) return LockHolder::from_json(json::parse(text));
    } catch (const std::exception&) {
        // being rewritten, or not ours: an unknown holder
    }
    LockHolder h;
    h.lock = fs::path(path).filename().string();
    return h;
}

/// Everyone who holds the directory now: the shard files held, else the main lock's writer.
std::vector<LockHolder> current_holders(const std::string& dir) {
    std::vector<LockHolder> out;
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.rfind(".lock-shard-", 0) == 0 && held_exclusively(it->path().string()))
            out.push_back(read_holder(it->path().string()));
    }
    if (out.empty()) out.push_back(read_holder(dir + "/" + kMainLock));
    return out;
}

std::string describe_all(const std::vector<LockHolder>& hs) {
    std::string s;
    for (const auto& h : hs) s += (s.empty() ? "" : "; ") + h.describe();
    return s;
}

void write_holder(int fd, const LockHolder& h, const std::string& path) {
    const std::string text = h.to_json().dump() + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != (ssize_t)text.size())
        throw Error("cannot write lock file " + path + ": " + std::strerror(errno));
}

}  // namespace

json LockHolder::to_json() const {
    json j = {{"pid", pid}, {"host", host}, {"started_at", started_at}, {"command", command}, {"lock", lock}};
    if (!writers.empty()) {
        j["writers"] = json::array();
        for (const auto& w : writers) j["writers"].push_back({{"pid", w.pid}, {"started_at", w.started_at}, {"command", w.command}});
    }
    return j;
}

LockHolder LockHolder::from_json(const json& j) {
    LockHolder h;
    h.pid = j.value("pid", 0L);
    h.host = j.value("host", "");
    h.started_at = j.value("started_at", "");
    h.command = j.value("command", "");
    h.lock = j.value("lock", "");
    if (j.contains("writers") && j["writers"].is_array())
        for (const auto& w : j["writers"]) {
            if (!w.is_object()) continue;
            LockHolder c = from_json(w);
            c.host = h.host;
            c.lock = h.lock;
            h.writers.push_back(std::move(c));
        }
    return h;
}

std::string LockHolder::describe() const {
    if (pid <= 0) return "an unknown process (lock file " + lock + " without a holder record)";
    // "gone" only where it can be known: a process of this host with no such PID
    auto one = [](const LockHolder& h, bool with_host) {
        std::string s = "PID " + std::to_string(h.pid) + (with_host ? " on host " + h.host : "");
        if (!h.started_at.empty()) s += " (since " + h.started_at;
        if (!h.command.empty()) s += (h.started_at.empty() ? " (" : ", ") + std::string("`") + h.command + "`";
        if (!h.started_at.empty() || !h.command.empty()) s += ")";
        if (temp_owner_gone(TempOwner{h.host, h.pid})) s += " - gone";
        return s;
    };
    std::string s = one(*this, true);
    for (const auto& w : writers) s += ", with its writer " + one(w, false);
    return s;
}

ResultsLock::ResultsLock(const std::string& dir, const ResultsLockRequest& req) : dir_(dir) {
    if (req.shard_count < 0 || (req.shard_count > 0 && (req.shard_index < 0 || req.shard_index >= req.shard_count)))
        throw ConfigError("shard " + std::to_string(req.shard_index) + "/" + std::to_string(req.shard_count) +
                          ": expected 0 <= I < N");
    if (req.part.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != std::string::npos)
        throw ConfigError("lock part '" + req.part + "': expected letters, digits, '-' and '_' only");
    std::error_code ec;
    fs::create_directories(dir, ec);
    if (!fs::is_directory(dir, ec))
        throw Error("cannot create results directory " + dir + (ec ? ": " + ec.message() : ""));
    exclusive_ = req.shard_count == 0 && req.part.empty();
    holder_.pid = (long)::getpid();
    holder_.host = this_host();
    holder_.started_at = utc_now_iso();
    holder_.command = req.command;
    holder_.lock = exclusive_ ? kMainLock : shard_lock_name(req);

    auto take = [&](int fd, int op, const std::string& path) {
        if (try_flock(fd, op, path, req.settle_ms)) return;
        const auto holders = current_holders(dir);
        if (!req.wait)
            throw ResultsBusy(dir + " is in use by " + describe_all(holders) +
                                  ": wait for it to finish (or pass --wait-lock to wait), or use another "
                                  "--results directory",
                              holders);
        if (req.on_wait) req.on_wait("waiting for " + dir + ", in use by " + describe_all(holders));
        blocking_flock(fd, op, path);
    };
    const std::string main_path = dir + "/" + kMainLock;
    main_fd_ = open_lock_file(main_path);
    try {
        take(main_fd_, exclusive_ ? LOCK_EX : LOCK_SH, main_path);
        if (exclusive_) {
            write_holder(main_fd_, holder_, main_path);
        } else {
            const std::string shard_path = dir + "/" + holder_.lock;
            shard_fd_ = open_lock_file(shard_path);
            take(shard_fd_, LOCK_EX, shard_path);
            write_holder(shard_fd_, holder_, shard_path);
        }
    } catch (...) {
        if (shard_fd_ >= 0) ::close(shard_fd_);
        ::close(main_fd_);
        throw;
    }
}

std::vector<int> ResultsLock::fds() const {
    std::vector<int> out;
    for (int fd : {main_fd_, shard_fd_})
        if (fd >= 0) out.push_back(fd);
    return out;
}

void ResultsLock::add_writer(long pid, const std::string& command) {
    LockHolder w;
    w.pid = pid;
    w.host = holder_.host;
    w.lock = holder_.lock;
    w.started_at = utc_now_iso();
    w.command = command;
    holder_.writers.push_back(std::move(w));
    const int fd = exclusive_ ? main_fd_ : shard_fd_;
    write_holder(fd, holder_, dir_ + "/" + holder_.lock);
}

ResultsLock::ResultsLock(ResultsLock&& o) noexcept
    : dir_(std::move(o.dir_)), exclusive_(o.exclusive_), main_fd_(o.main_fd_), shard_fd_(o.shard_fd_),
      holder_(std::move(o.holder_)) {
    o.main_fd_ = o.shard_fd_ = -1;
}

ResultsLock::~ResultsLock() {
    // Closing the descriptors releases the flocks. The files stay: deleting a lock file another process
    // has opened but not yet locked would let two processes lock two different files.
    if (shard_fd_ >= 0) ::close(shard_fd_);
    if (main_fd_ >= 0) ::close(main_fd_);
}

bool lock_holder_gone(const std::string& dir, const std::string& lock_name, const ResultsLock& mine) {
    if (mine.exclusive()) return true;                   // nobody else holds any lock of the directory
    if (lock_name.empty() || lock_name == kMainLock) return true;  // an unsharded run: we hold .lock shared
    if (lock_name == mine.holder().lock) return true;    // our own shard's file: its previous holder died
    return !held_exclusively(dir + "/" + lock_name);
}

bool is_lock_file_name(const std::string& name) {
    return name == kMainLock || name == kManifestLock || name.rfind(".lock-shard-", 0) == 0;
}

void clear_locked_dir(const ResultsLock& lock) {
    if (!lock.exclusive())
        throw ConfigError("--force deletes every result in " + lock.dir() + ": it needs the whole directory, not a shard");
    std::error_code ec;
    for (auto it = fs::directory_iterator(lock.dir(), ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
        if (is_lock_file_name(it->path().filename().string())) continue;
        std::error_code rec;
        fs::remove_all(it->path(), rec);
        if (rec) throw Error("cannot remove " + it->path().string() + ": " + rec.message());
    }
    if (ec) throw Error("cannot list " + lock.dir() + ": " + ec.message());
}

bool holds_only_lock_files(const std::string& dir) {
    std::error_code ec;
    for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec))
        if (!is_lock_file_name(it->path().filename().string())) return false;
    return true;
}

int clean_temp_files(const ResultsLock& lock) {
    std::error_code ec;
    int removed = 0;
    for (auto it = fs::recursive_directory_iterator(lock.dir(), ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        if (!it->is_regular_file(ec)) continue;
        const auto owner = temp_file_owner(it->path().string());
        if (!owner) continue;
        if (lock.exclusive() || temp_owner_is_me(*owner) || temp_owner_gone(*owner)) {
            std::error_code rec;
            if (fs::remove(it->path(), rec)) ++removed;
        }
    }
    return removed;
}

}  // namespace retro
