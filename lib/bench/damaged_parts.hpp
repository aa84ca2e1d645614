#pragma once
// Damaged part files (docs/results.md, "Damaged parts"). Runs write parts atomically, so a run never
// leaves a half-written one; a disk fault, an interrupted copy or a hand edit can. A part that does not
// parse, is not a part, or holds another unit's key (copied from another run's folder) is damaged:
// `run --resume` moves it aside to NAME.damaged and recomputes its unit; `validate --results DIR` lists
// them without changing anything. The closed loop's Python side (python/retro_bench/closedloop/results.py) applies
// the same rules with the same words.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace retro {

/// A json exception's message without its "[json.exception.<kind>.<id>] " prefix.
std::string json_error_text(const std::exception& e);

/// Parses the text of a part file. On failure returns a discarded value and sets `damage` to what is
/// wrong, in words: "empty file", "truncated JSON (ends after 100 bytes, inside a value)", "not JSON
/// (parse error at line 1, column 7: ...)".
nlohmann::json parse_part_text(const std::string& text, std::string& damage);

/// Moves the damaged file `path` aside to `path`.damaged, or `path`.damaged.1, .2, ... when that name is
/// taken (an earlier damaged copy is never overwritten); returns the new path. Throws Error naming both.
std::string move_aside_damaged(const std::string& path);

/// The one line `run --resume` prints for a part it moved aside.
std::string damaged_part_note(const std::string& path, const std::string& damage, const std::string& aside);

/// What is wrong with a closed-loop part parts/<run_id>/<case_id>.json ("" when nothing): it parses, is an
/// object, its "case" is `case_id`, and its "run" is `run_id` (the reference, run_id "reference", has none).
std::string closed_loop_part_damage(const std::string& text, const std::string& run_id, const std::string& case_id);

/// What is wrong with a .npy file ("" when nothing): the magic, a readable header, and a size that
/// matches the header's dtype and shape (a truncated copy is shorter).
std::string npy_damage(const std::string& path);

struct DamagedFile {
    std::string path;
    std::string damage;
};

struct PartsScan {
    bool closed_loop = false;  ///< the directory's manifest says "experiment": "closed-loop"
    size_t checked = 0;        ///< part files checked (closed loop: with the reference's .npy files)
    std::vector<DamagedFile> damaged;
};

/// Checks every part file of the results directory `dir` (open-loop: parts/<run_id>/L<l>_H<h>.json;
/// closed-loop: parts/<run_id>/<case_id>.json and parts/reference/<case_id>.npy) against its path's key,
/// changing nothing. Throws Error when `dir` is not a results directory.
PartsScan scan_results_parts(const std::string& dir);

}  // namespace retro
