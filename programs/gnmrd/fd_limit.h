// The open-file limit gnmrd runs under (docs/limits.md, "File
// descriptors"). Each connection (a rank, a relay, gnmrctl) takes a
// descriptor, and so do the store's open files (bounded budgets, never one
// per job), so the soft RLIMIT_NOFILE - often 1,024 by default - is what
// caps the connections gnmrd can accept: past it accept4 fails with EMFILE
// and every new client times out. gnmrd never uses select(2) (FD_SETSIZE
// does not bind it), so it raises its soft limit to the hard limit at
// start, as systemd recommends for such programs, and says what it set.
#pragma once

#include <cstdint>
#include <string>

namespace gnmr {

// Descriptors gnmrd holds besides one per connection, at most: the store's
// budgets (event log 128, trace recorder 64) and a margin for the state
// dir lock, gRPC's own, the metrics listener and a snapshot being written.
inline constexpr uint64_t kFixedDescriptors = 128 + 64 + 64;

struct FdLimit {
  uint64_t soft_before = 0;
  uint64_t soft = 0;  // in force now
  uint64_t hard = 0;
  std::string error;  // why the soft limit could not be raised ("" if it was, or need not be)
};

// Raises the soft RLIMIT_NOFILE to the hard limit (an unlimited hard limit:
// to the kernel's fs.nr_open). Never lowers it.
FdLimit RaiseFdLimit();

// One line for the log: what was set, and a warning when the limit leaves
// fewer than 1,024 connections besides kFixedDescriptors.
std::string DescribeFdLimit(const FdLimit& l, bool* low);

}  // namespace gnmr
