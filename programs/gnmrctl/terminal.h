// The terminal of `gnmrctl top`: raw input (no echo, no line buffering;
// Ctrl-C still raises SIGINT) and the alternate screen, restored on every
// way out: the destructor, and SIGINT/SIGTERM/SIGHUP (the handler restores
// with async-signal-safe calls only and exits). Plain ANSI, no curses.
// One Terminal at a time per process (the saved state is process-wide,
// because a signal handler must reach it).
#pragma once

#include <chrono>
#include <string>
#include <utility>

namespace gnmr {
namespace cli {

class Terminal {
 public:
  using Clock = std::chrono::steady_clock;

  // Raw input when stdin is a terminal, and the alternate screen with a
  // hidden cursor.
  Terminal();
  ~Terminal();
  Terminal(const Terminal&) = delete;
  Terminal& operator=(const Terminal&) = delete;

  // Columns and rows (80x24 when unknown).
  static std::pair<int, int> Size();

  // Waits up to `timeout` for a key; true when q (or Q) was pressed or the
  // terminal went away.
  bool WaitForQuit(Clock::duration timeout) const;

  // Home + clear, before each frame.
  static const char* ClearFrame();
  // Writes all of `s` to stdout (retrying short writes and EINTR).
  static void Write(const std::string& s);

 private:
  bool input_ = false;
};

}  // namespace cli
}  // namespace gnmr
