#include "daemon/store/event_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "daemon/store/durable_file.h"

namespace gnmr {
namespace store {
namespace {

// pread until `size` bytes are in or EOF.
StatusOr<size_t> ReadAt(int fd, char* buf, size_t size, off_t offset, const std::string& path) {
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::pread(fd, buf + got, size - got, offset + static_cast<off_t>(got));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("read " + path, errno);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  return got;
}

// The last `max_lines` non-empty complete lines of `buf`, oldest first.
// The text after the last '\n' is a torn line; with `cut_head` the text
// before the first '\n' is a partial one.
std::vector<std::string> CompleteLines(const std::string& buf, bool cut_head, size_t max_lines) {
  std::vector<std::string> lines;
  const size_t last = buf.rfind('\n');
  if (last == std::string::npos) return lines;
  const size_t begin = cut_head ? buf.find('\n') + 1 : 0;
  size_t end = last;  // one past the current line
  while (end > begin && lines.size() < max_lines) {
    const size_t prev = buf.rfind('\n', end - 1);
    const size_t start = (prev == std::string::npos || prev < begin) ? begin : prev + 1;
    if (end > start) lines.emplace_back(buf, start, end - start);
    if (start == begin) break;
    end = start - 1;
  }
  std::reverse(lines.begin(), lines.end());
  return lines;
}

// Unlinks `path`; a missing file is fine.
Status RemoveIfPresent(const std::string& path) {
  if (::unlink(path.c_str()) == 0 || errno == ENOENT) return Status::Ok();
  return ErrnoStatus("unlink " + path, errno);
}

}  // namespace

StatusOr<int> OpenForAppend(const std::string& path, uint64_t* size_out) {
  int fd = -1;
  uint64_t size = 0;
  GNMR_RETURN_IF_ERROR(OpenWithSize(path, O_RDWR | O_APPEND | O_CREAT, &fd, &size));
  if (size > 0) {
    char last = '\n';
    StatusOr<size_t> n = ReadAt(fd, &last, 1, static_cast<off_t>(size - 1), path);
    Status s = n.status();
    if (s.ok() && last != '\n') {
      s = WriteAll(fd, "\n", path);
      ++size;
    }
    if (!s.ok()) {
      ::close(fd);
      return s;
    }
  }
  if (size_out != nullptr) *size_out = size;
  return fd;
}

StatusOr<std::vector<std::string>> ReadTailLines(const std::string& path, size_t max_lines,
                                                 size_t max_bytes) {
  int fd = -1;
  uint64_t size = 0;
  GNMR_RETURN_IF_ERROR(OpenWithSize(path, O_RDONLY, &fd, &size));
  const size_t limit = static_cast<size_t>(std::min<uint64_t>(size, max_bytes));
  // Read a growing window from the end until it holds enough lines.
  std::string buf;
  size_t window = std::min<size_t>(limit, 1 << 20);
  for (;;) {
    buf.assign(window, '\0');
    StatusOr<size_t> got = ReadAt(fd, buf.data(), window, static_cast<off_t>(size - window), path);
    if (!got.ok()) {
      ::close(fd);
      return got.status();
    }
    buf.resize(*got);
    const size_t newlines = static_cast<size_t>(std::count(buf.begin(), buf.end(), '\n'));
    if (newlines > max_lines || window == limit) break;
    window = std::min(limit, window * 4);
  }
  ::close(fd);
  return CompleteLines(buf, /*cut_head=*/buf.size() < size, max_lines);
}

std::string RotatedPath(const std::string& path) { return path + ".1"; }

Status RemoveWithRotated(const std::string& path) {
  Status s = RemoveIfPresent(path);
  Status t = RemoveIfPresent(RotatedPath(path));
  return s.ok() ? t : s;
}

}  // namespace store
}  // namespace gnmr
