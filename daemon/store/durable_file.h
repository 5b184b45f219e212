// Crash-safe file replacement and small POSIX helpers for the state store.
//
// Design: ReplaceFileDurably writes the new contents to a temporary file in
// the same directory ("<name>.tmp-<pid>-<n>"), fsyncs it, renames it over
// the target and fsyncs the directory. rename(2) is atomic within a file
// system, so after a crash at any point the target is either the complete
// old file or the complete new one; the worst left behind is a stray temp
// file, which readers ignore and RemoveTempFiles deletes. Optionally the old
// file is first kept as `previous` (a hard link, itself installed by
// rename), so a reader can fall back one generation if the newest file is
// damaged by something rename cannot protect against (disk corruption, a
// file system that lost data it claimed was synced).
//
// Every function returns a Status naming the path and errno text; nothing
// throws.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "gnmr/status.h"

namespace gnmr {
namespace store {

// mkdir -p with `mode` for the directories it creates; each new directory's
// parent is fsynced so the entry survives a crash.
Status MakeDirs(const std::string& path, mode_t mode = 0750);

// Replaces `path` by `bytes` atomically and durably (see above). If
// `previous` is not empty and `path` exists, the old contents remain
// available as `previous`. Owner-only by default: snapshots hold job tokens.
Status ReplaceFileDurably(const std::string& path, std::string_view bytes,
                          const std::string& previous = "", mode_t mode = 0600);

// Reads a whole file. NotFound if it does not exist; ResourceExhausted if
// it is larger than `max_bytes`.
StatusOr<std::string> ReadWholeFile(const std::string& path, size_t max_bytes);

// Removes the temporary files ReplaceFileDurably leaves behind when a
// process dies mid-write ("<name>.tmp-*" in `dir`). Only call it when no
// other writer of these files is running (at startup).
Status RemoveTempFiles(const std::string& dir, const std::string& name);

// fsync(2) on a directory, so renames and new entries in it are durable.
Status FsyncDir(const std::string& dir);

// Opens `path` with `flags` (O_CLOEXEC added; O_CREAT uses mode 0640) and
// reports its size. The caller closes *fd.
Status OpenWithSize(const std::string& path, int flags, int* fd, uint64_t* size);

// "<what>: <strerror(err)>" with a code for the errno: ENOENT NotFound,
// ENOSPC ResourceExhausted, EACCES PermissionDenied, else Internal.
Status ErrnoStatus(const std::string& what, int err);

// Writes all of `bytes` to `fd`, retrying short writes and EINTR.
Status WriteAll(int fd, std::string_view bytes, const std::string& what);

}  // namespace store
}  // namespace gnmr
