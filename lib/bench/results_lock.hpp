#pragma once
// The lock of a results directory: who may write into it right now (docs/results.md, "Locks").
//
// Lock files live inside the directory and are locked with flock(2) (on Linux NFS flock is carried by
// NFS byte-range locks, so it also works across hosts on NFSv4; Lustre needs the `flock` mount option):
//
//   <dir>/.lock                   every writer locks it: exclusive for an unsharded run (and for --force,
//                                 which deletes results), shared for a shard.
//   <dir>/.lock-shard-<I>-of-<N>  a shard I of N (0 <= I < N) also locks its own file exclusively, so
//                                 two processes of one shard never run at once.
//
// So an unsharded run excludes everything; shards of one config coexist with each other but not with an
// unsharded run or a second copy of themselves. The file a process locks exclusively holds its identity
// (JSON: pid, host, started_at, command, lock) so that a refused run can say who holds the directory.
// The kernel drops a flock when its holder dies however it dies (SIGKILL, OOM): a lock that can be taken
// proves its previous holder gone, which is how stale `running` sessions and stale temp files are found.
//
// Use by `run --shard I/N` (and anything else writing into a results directory):
//     ResultsLockRequest req;  req.shard_index = I;  req.shard_count = N;  req.wait = wait_lock;
//     ResultsLock lock(dir, req);            // throws ResultsBusy (with the holders) unless req.wait
//     ... lock.exclusive() == false: do not delete others' files; clean_temp_files(lock) is safe ...
//     lock.holder() -> this process's identity; record lock.holder().lock in the manifest session so
//     session_holder_gone(dir, session_lock, lock) can later tell whether that session's process died.
// The lock is released by the destructor (or by the kernel when the process dies).
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace retro {

/// Who holds (or held) a lock file: what its holder wrote into it.
struct LockHolder {
    long pid = 0;
    std::string host;
    std::string started_at;  ///< UTC ISO 8601
    std::string command;
    std::string lock;  ///< the lock file's name in the directory: ".lock" or ".lock-shard-..."
    /// The holder's child processes that write into the directory and hold the lock with it (they
    /// inherited its descriptors: ResultsLock::fds, core/child_process.hpp): the lock is free only when
    /// the holder and every one of them are gone. Same host and lock as the holder.
    std::vector<LockHolder> writers;

    nlohmann::json to_json() const;
    static LockHolder from_json(const nlohmann::json& j);  ///< missing fields stay empty
    /// "PID 123 on host h (since 2026-..., `retro-bench run c.json`)", then each writer ("with its writer
    /// PID 456 (since ..., `...`)"); a process of this host that is gone is marked so ("PID 123 ... gone").
    std::string describe() const;
};

/// The results directory is locked by another process and the request did not ask to wait.
class ResultsBusy : public Error {
  public:
    ResultsBusy(const std::string& what, std::vector<LockHolder> holders)
        : Error(what), holders_(std::move(holders)) {}
    const std::vector<LockHolder>& holders() const { return holders_; }

  private:
    std::vector<LockHolder> holders_;
};

struct ResultsLockRequest {
    /// Block until the lock is free (--wait-lock) instead of throwing ResultsBusy.
    bool wait = false;
    /// Shard I of N (0 <= I < N): a shared lock on .lock plus an exclusive one on .lock-shard-I-of-N.
    /// shard_count == 0 and no `part`: unsharded, an exclusive lock on .lock.
    int shard_index = 0;
    int shard_count = 0;
    /// A named part of the work that runs beside other parts, as a shard does (a closed loop's
    /// --only-kind): a shared lock on .lock plus an exclusive one on .lock-shard-<part> (with a shard:
    /// .lock-shard-I-of-N-<part>). Letters, digits, '-' and '_' only.
    std::string part;
    /// Recorded in the lock file so that a refused process can name what holds the directory.
    std::string command;
    /// Called once, with the holders, before blocking (wait == true) on a held lock.
    std::function<void(const std::string&)> on_wait;
    /// How long a refused attempt keeps retrying before it counts as held: another process's probe
    /// (lock_holder_gone, listing holders) holds a lock for microseconds, and shards started together
    /// must not refuse each other over it.
    int settle_ms = 1000;
};

/// An acquired lock on a results directory (created if absent). Movable, released on destruction.
class ResultsLock {
  public:
    /// Throws ResultsBusy naming every holder's PID and host when the lock is held (unless
    /// request.wait), Error when the directory or lock file cannot be created.
    ResultsLock(const std::string& dir, const ResultsLockRequest& request);
    ~ResultsLock();
    ResultsLock(ResultsLock&& o) noexcept;
    ResultsLock& operator=(ResultsLock&&) = delete;
    ResultsLock(const ResultsLock&) = delete;
    ResultsLock& operator=(const ResultsLock&) = delete;

    const std::string& dir() const { return dir_; }
    /// True for an unsharded lock: no other process writes into the directory.
    bool exclusive() const { return exclusive_; }
    /// This process's identity as written into its lock file.
    const LockHolder& holder() const { return holder_; }
    /// The open lock descriptors: a child that inherits them holds the lock with this process
    /// (core/child_process.hpp ChildOptions::inherit_fds), so the lock outlives this process as long
    /// as the child lives.
    std::vector<int> fds() const;
    /// Records a child that writes into the directory (it inherited fds()) in the lock file, so that a
    /// refused run names it: the live writer when this process is gone. Throws Error when the lock file
    /// cannot be written.
    void add_writer(long pid, const std::string& command);

  private:
    std::string dir_;
    bool exclusive_ = true;
    int main_fd_ = -1, shard_fd_ = -1;
    LockHolder holder_;
};

/// True when the process that held `lock_name` in `dir` (a session's recorded lock, ".lock" or
/// ".lock-shard-I-of-N") is certainly gone, given that this process holds `mine`: with an exclusive lock
/// every other holder is gone; with a shard lock, the other's lock file must be free (probed with a
/// non-blocking flock) or be this process's own shard file.
bool lock_holder_gone(const std::string& dir, const std::string& lock_name, const ResultsLock& mine);

/// Names of lock files: ".lock", ".lock-shard-..." and the closed loop's ".lock-manifest" (never result
/// files; excluded from --force's deletion and from has_results()).
bool is_lock_file_name(const std::string& file_name);

/// --force: deletes everything in the locked directory but its lock files. Throws ConfigError unless the
/// lock is exclusive (a shard cannot delete the other shards' results), Error naming what it cannot delete.
void clear_locked_dir(const ResultsLock& lock);

/// True when `dir` holds nothing but lock files (or does not exist): no result of any run.
bool holds_only_lock_files(const std::string& dir);

/// Removes temporary files ("*.tmp-*", core/temp_files.hpp) under the locked directory that are
/// this process's own or whose writer is gone: with an exclusive lock, every one (no other writer can
/// exist); with a shard lock, only those made on this host by a dead process (a live shard's are in
/// flight; another host's are left to the next exclusive holder). Returns how many were removed.
int clean_temp_files(const ResultsLock& lock);

}  // namespace retro
