// File-level helpers of the job event log (events.jsonl).
//
// A crash can leave the last line of the file torn (no '\n'). Appending
// after it would glue the next record onto the torn one, so OpenForAppend
// ends such a file with '\n' first: the torn line stays unreadable (and is
// skipped when read back) but every later line is intact.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gnmr/status.h"

namespace gnmr {
namespace store {

// Opens (creating, mode 0640) `path` for appending and makes sure it ends
// with '\n'. Returns the file descriptor (the caller closes it) and, in
// *size if given, the file's size.
StatusOr<int> OpenForAppend(const std::string& path, uint64_t* size = nullptr);

// The last `max_lines` complete lines of `path` (without '\n'), oldest
// first, reading at most `max_bytes` from the end. A line cut by that bound
// is left out, and so is a torn last line. NotFound if there is no file.
StatusOr<std::vector<std::string>> ReadTailLines(const std::string& path, size_t max_lines,
                                                 size_t max_bytes);

// The name a full `path` is renamed to when it rotates (one older file is
// kept: `path` + ".1").
std::string RotatedPath(const std::string& path);

// Removes `path` and its rotated file; a missing file is fine. The first
// error, if any (both removals are tried).
Status RemoveWithRotated(const std::string& path);

}  // namespace store
}  // namespace gnmr
