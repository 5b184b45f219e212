#include "programs/gnmrctl/terminal.h"

#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>

#include "programs/gnmrctl/commands.h"

namespace gnmr {
namespace cli {
namespace {

// Escape sequences: alternate screen + hidden cursor on entry; home + clear
// for each frame; the reverse on exit.
constexpr char kEnterScreen[] = "\x1b[?1049h\x1b[?25l";
constexpr char kLeaveScreen[] = "\x1b[?25h\x1b[?1049l";
constexpr char kClearFrameSeq[] = "\x1b[H\x1b[2J";

struct termios g_saved_termios;
volatile std::sig_atomic_t g_termios_saved = 0;
volatile std::sig_atomic_t g_screen_entered = 0;

void WriteAll(int fd, const char* s, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, s, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    s += w;
    n -= static_cast<size_t>(w);
  }
}

// Async-signal-safe: write(2) and tcsetattr(3) only.
void RestoreTerminal() {
  if (g_screen_entered) {
    WriteAll(STDOUT_FILENO, kLeaveScreen, sizeof(kLeaveScreen) - 1);
    g_screen_entered = 0;
  }
  if (g_termios_saved) {
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &g_saved_termios);
    g_termios_saved = 0;
  }
}

// SIGINT/SIGTERM/SIGHUP: restore the terminal and leave at once (a poll of
// the daemon may be in flight; there is nothing to flush).
void OnSignal(int) {
  RestoreTerminal();
  ::_exit(kExitOk);
}

}  // namespace

Terminal::Terminal() {
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  if (::isatty(STDIN_FILENO) && ::tcgetattr(STDIN_FILENO, &g_saved_termios) == 0) {
    struct termios raw = g_saved_termios;
    raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
    raw.c_cc[VMIN] = 0;
    raw.c_cc[VTIME] = 0;
    g_termios_saved = 1;
    ::tcsetattr(STDIN_FILENO, TCSANOW, &raw);
    input_ = true;
  }
  WriteAll(STDOUT_FILENO, kEnterScreen, sizeof(kEnterScreen) - 1);
  g_screen_entered = 1;
}

Terminal::~Terminal() { RestoreTerminal(); }

std::pair<int, int> Terminal::Size() {
  struct winsize ws {};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_row > 0) {
    return {ws.ws_col, ws.ws_row};
  }
  return {80, 24};
}

bool Terminal::WaitForQuit(Clock::duration timeout) const {
  const auto end = Clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) return false;
    if (!input_) {  // nothing to read: just wait
      ::poll(nullptr, 0, static_cast<int>(left.count()));
      continue;
    }
    struct pollfd p {
      STDIN_FILENO, POLLIN, 0
    };
    const int n = ::poll(&p, 1, static_cast<int>(left.count()));
    if (n <= 0) continue;  // timeout or EINTR: the loop checks the clock
    char buf[64];
    const ssize_t r = ::read(STDIN_FILENO, buf, sizeof(buf));
    if (r == 0) return true;  // the terminal went away
    for (ssize_t i = 0; i < r; ++i) {
      if (buf[i] == 'q' || buf[i] == 'Q') return true;
    }
  }
}

const char* Terminal::ClearFrame() { return kClearFrameSeq; }

void Terminal::Write(const std::string& s) { WriteAll(STDOUT_FILENO, s.data(), s.size()); }

}  // namespace cli
}  // namespace gnmr
