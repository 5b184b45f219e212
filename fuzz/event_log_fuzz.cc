// Fuzz target: the job event log reader (controller/publish/event_json.h,
// event_file.h, event_log.h). The input is the bytes of an events.jsonl
// file, as gnmrd finds it after a crash, a full disk or an edit: every line
// goes through ParseEventJsonLine, the file's tail through ReadTailLines
// (with a small byte and line budget taken from the first two bytes), and
// the whole through EventLog::ReloadTail and List.
//
// Properties, besides no crash and no sanitizer report:
// - a line that parses renders (AppendEventJsonLine) to a line that parses
//   to an event rendering the same: reading back what was written is
//   stable;
// - ReadTailLines returns at most max_lines lines within max_bytes, and
//   they are the file's last non-empty complete lines (a torn last line is
//   left out);
// - List returns at most `limit` events, none before `since_step`.
//
// Speed (docs/fuzzing.md, "Speed"): the file lives on tmpfs (/dev/shm when
// there is one), and the log's writer thread is stopped at start: this
// target appends nothing, and a stopped log's RemoveJob works on the calling
// thread, so an input costs no thread hand-off and no disk.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "controller/publish/event_json.h"
#include "daemon/store/event_file.h"
#include "daemon/store/event_log.h"
#include "daemon/store/job_dir.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/job_harness.h"

namespace gnmr::fuzz {
namespace {

constexpr const char* kJobId = "fuzz-job";

struct Env {
  std::string state_dir;
  std::string events_path;
  std::unique_ptr<store::EventLog> log;
};

Env* env = nullptr;

void RemoveStateDir() {
  if (env == nullptr) return;
  env->log.reset();
  std::error_code ec;
  std::filesystem::remove_all(env->state_dir, ec);
}

void CheckLines(std::string_view text) {
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    StatusOr<v1::Event> e = ParseEventJsonLine(text.substr(start, end - start));
    if (e.ok()) {
      std::string once;
      AppendEventJsonLine(kJobId, *e, &once);
      FUZZ_CHECK(once.size() <= kMaxEventLineBytes + 1, "rendered line of %zu bytes", once.size());
      StatusOr<v1::Event> back = ParseEventJsonLine(once);
      FUZZ_CHECK(back.ok(), "a rendered event does not parse: %s\n%s",
                 back.status().ToString().c_str(), once.c_str());
      std::string twice;
      AppendEventJsonLine(kJobId, *back, &twice);
      FUZZ_CHECK(once == twice, "rendering is not stable:\n%s%s", once.c_str(), twice.c_str());
    }
    start = end + 1;
  }
}

void CheckTail(std::string_view text, size_t max_lines, size_t max_bytes) {
  StatusOr<std::vector<std::string>> lines =
      store::ReadTailLines(env->events_path, max_lines, max_bytes);
  FUZZ_CHECK(lines.ok(), "ReadTailLines: %s", lines.status().ToString().c_str());
  FUZZ_CHECK(lines->size() <= max_lines, "%zu lines, at most %zu", lines->size(), max_lines);
  std::string joined;
  for (const std::string& l : *lines) {
    FUZZ_CHECK(l.find('\n') == std::string::npos, "a line with a newline");
    joined += l;
    joined += '\n';
  }
  FUZZ_CHECK(joined.size() <= max_bytes, "%zu bytes read, at most %zu", joined.size(), max_bytes);
  // They are the last non-empty complete lines (blank lines are skipped).
  std::vector<std::string_view> complete;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string_view::npos; start = nl + 1) {
    if (nl > start) complete.push_back(text.substr(start, nl - start));
  }
  FUZZ_CHECK(lines->size() <= complete.size(), "%zu lines of %zu", lines->size(), complete.size());
  const size_t skip = complete.size() - lines->size();
  for (size_t i = 0; i < lines->size(); ++i) {
    FUZZ_CHECK((*lines)[i] == complete[skip + i],
               "line %zu is not the file's complete line %zu from the end", i, lines->size() - i);
  }
}

void CheckReload(uint8_t since, uint8_t limit) {
  // Drops the ring, keeps the file (what a restart leaves to reload).
  Status s = env->log->RemoveJob(kJobId, /*delete_files=*/false);
  FUZZ_CHECK(s.ok(), "RemoveJob: %s", s.ToString().c_str());
  s = env->log->ReloadTail(kJobId);
  FUZZ_CHECK(s.ok(), "ReloadTail: %s", s.ToString().c_str());
  const int64_t since_step = static_cast<int64_t>(since) - 128;
  const uint32_t max = limit % 8;
  const std::vector<v1::Event> events = env->log->List(kJobId, since_step, max);
  FUZZ_CHECK(events.size() <= (max == 0 ? store::EventLog::kDefaultListLimit : max),
             "%zu events for limit %u", events.size(), max);
  for (const v1::Event& e : events) {
    FUZZ_CHECK(e.observed_step() >= since_step, "event of step %lld listed since %lld",
               static_cast<long long>(e.observed_step()), static_cast<long long>(since_step));
  }
}

}  // namespace
}  // namespace gnmr::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using gnmr::fuzz::env;
  gnmr::fuzz::QuietLogs();
  // tmpfs when there is one: every input writes the file and reads it back.
  std::error_code ec;
  const bool shm = std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0;
  std::string tmpl =
      shm ? "/dev/shm/gnmr-event-log-fuzz-XXXXXX" : "/tmp/gnmr-event-log-fuzz-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  env = new gnmr::fuzz::Env;
  env->state_dir = tmpl;
  const std::string dir = gnmr::store::JobDir(env->state_dir, gnmr::fuzz::kJobId);
  std::filesystem::create_directories(dir);
  env->events_path = dir + "/events.jsonl";
  gnmr::store::EventLogOptions options;
  options.ring_capacity = 16;  // small, so the tail bound matters
  env->log = std::make_unique<gnmr::store::EventLog>(env->state_dir, options);
  env->log->Stop();  // nothing is appended; RemoveJob then runs on this thread
  std::atexit(gnmr::fuzz::RemoveStateDir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using gnmr::fuzz::env;
  if (env == nullptr) LLVMFuzzerInitialize(nullptr, nullptr);
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  gnmr::fuzz::CheckLines(text);

  int fd = ::open(env->events_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
  FUZZ_CHECK(fd >= 0, "cannot write %s", env->events_path.c_str());
  FUZZ_CHECK(::write(fd, data, size) == static_cast<ssize_t>(size), "short write");
  ::close(fd);
  const uint8_t a = size > 0 ? data[0] : 0;
  const uint8_t b = size > 1 ? data[1] : 0;
  gnmr::fuzz::CheckTail(text, a % 8, 1 + static_cast<size_t>(b) * 4);
  gnmr::fuzz::CheckReload(a, b);
  return 0;
}
