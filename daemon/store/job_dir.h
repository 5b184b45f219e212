// Where a job's files live under the state directory (docs/architecture.md,
// "gnmrd: jobs and the store"):
//
//   <state_dir>/jobs/<escaped job id>/snapshot.pb     controller snapshot
//   <state_dir>/jobs/<escaped job id>/events.jsonl    event log
//
// Job ids come from the network and are untrusted, so they are never used
// as paths directly. EscapeJobId maps any byte string to one safe directory
// name:
// - bytes of [A-Za-z0-9._:-] stay as they are, except a leading '.', so
//   ".", ".." and hidden names cannot occur;
// - every other byte (and the leading '.') becomes %XX (uppercase hex);
// - the empty id becomes "%" (no escape is a lone '%');
// - a name longer than kMaxJobDirName is cut and ends in "~" plus a 64-bit
//   hash of the whole id ('~' never occurs otherwise), so names stay well
//   under NAME_MAX. Such names cannot be unescaped; the snapshot frame also
//   records the job id, which is the authority.
// The mapping is injective (up to the hash, for ids that need it), so two
// jobs never share a directory, and the result never contains '/'.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gnmr {
namespace store {

inline constexpr size_t kMaxJobDirName = 200;

std::string EscapeJobId(std::string_view job_id);

// The job id of a directory name made by EscapeJobId; nullopt for hashed
// (shortened) names and for names EscapeJobId cannot produce.
std::optional<std::string> UnescapeJobDir(std::string_view name);

// <state_dir>/jobs
std::string JobsDir(const std::string& state_dir);
// <state_dir>/jobs/<EscapeJobId(job_id)>
std::string JobDir(const std::string& state_dir, std::string_view job_id);

}  // namespace store
}  // namespace gnmr
