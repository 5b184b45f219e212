// `gnmrctl top`: one frame (--once, and a stdout that is not a terminal)
// against a live in-process daemon whose job has a unit in recovery; an
// unknown job; and the live view in a pseudo-terminal, which must quit on
// 'q' within 2 s and give the terminal back as it found it.
#include <poll.h>
#include <pty.h>
#include <termios.h>

#include "tests/gnmrctl/ctl_harness.h"

namespace gnmr::testing {
namespace {

// The lines of `text` from the one starting with `title` up to the next
// blank line.
std::vector<std::string> Section(const std::string& text, const std::string& title) {
  std::vector<std::string> out;
  std::istringstream in(text);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (!inside && line.rfind(title, 0) == 0) {
      inside = true;
    } else if (inside && line.empty()) {
      break;
    }
    if (inside) out.push_back(line);
  }
  return out;
}

TEST_F(CtlTest, TopOnceShowsBudgetRecoveryUnitsRanksEvents) {
  Start();
  DriveSpike();
  CtlResult r = Run({"top", "--job", "j", "--once", "--target", tcp_});
  ASSERT_EQ(r.code, 0) << Show(r);
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << "escape sequences in --once output";

  // Header: job, last decided step, no rate yet (one poll), 1 of world 1.
  const std::vector<std::string> head = Fields(LinesWith(r.out, "gnmrctl top").at(0));
  EXPECT_EQ(std::vector<std::string>(head.begin(), head.begin() + 11),
            (std::vector<std::string>{"gnmrctl", "top", "job", "j", "step", "10", "rate", "-",
                                      "steps/s", "ranks", "1/1"}))
      << r.out;
  // Budget: 1 of max_o 1 taken, full bar; 1 admission, 1 denial.
  EXPECT_NE(r.out.find("budget [####################] 1/1 in recovery  admitted 1  denied 1"),
            std::string::npos)
      << r.out;

  // The admitted unit: since 11, until 16, 6 steps left after step 10.
  const auto rec = Section(r.out, "IN RECOVERY");
  ASSERT_EQ(rec.size(), 3u) << r.out;
  EXPECT_EQ(rec[0], "IN RECOVERY (1/1)");
  EXPECT_EQ(Fields(rec[1]), (std::vector<std::string>{"UNIT", "ACTION", "SINCE", "UNTIL", "STEPS",
                                                      "LEFT", "GNMR"}));
  EXPECT_EQ(Fields(rec[2]),
            (std::vector<std::string>{"layers.1.mlp", "promote", "11", "16", "6", "20"}));

  // Top units by GNMR, highest first, each with a one-sample sparkline
  // (the unit's only sample is its own maximum: a full block).
  const auto top = Section(r.out, "TOP UNITS BY GNMR");
  ASSERT_EQ(top.size(), 6u) << r.out;  // title, header, 4 units
  const auto first = Fields(top[2]);
  ASSERT_EQ(first.size(), 7u) << top[2];
  EXPECT_EQ(std::vector<std::string>(first.begin(), first.begin() + 3),
            (std::vector<std::string>{"layers.1.mlp", "recovery", "20"}));
  EXPECT_EQ(first[6], "\u2588");
  EXPECT_EQ(Fields(top[3]).at(0), "layers.1.attn");
  EXPECT_EQ(Fields(top[3]).at(2), "10");

  // Ranks: rank 0 connected at step 10, no lag.
  const auto ranks = Section(r.out, "RANKS");
  ASSERT_EQ(ranks.size(), 3u) << r.out;
  const auto rank0 = Fields(ranks[2]);
  ASSERT_GE(rank0.size(), 4u);
  EXPECT_EQ(std::vector<std::string>(rank0.begin(), rank0.begin() + 4),
            (std::vector<std::string>{"0", "yes", "10", "0"}));

  // Events: the admission and the denial of step 10.
  const auto events = Section(r.out, "EVENTS");
  EXPECT_EQ(LinesWith(r.out, "admission").size(), 1u) << r.out;
  ASSERT_EQ(LinesWith(r.out, "denial").size(), 1u) << r.out;
  const auto admission = Fields(LinesWith(r.out, "admission")[0]);
  EXPECT_EQ(std::vector<std::string>(admission.begin(), admission.begin() + 4),
            (std::vector<std::string>{"10", "admission", "layers.1.mlp", "promote"}));
  EXPECT_EQ(Fields(LinesWith(r.out, "denial")[0]).at(2), "layers.1.attn");
  EXPECT_GE(events.size(), 4u) << r.out;

  // stdout not a terminal: the same one frame without --once (the harness
  // sends stdout to a file).
  CtlResult piped = Run({"top", "--job", "j", "--target", unix_});
  ASSERT_EQ(piped.code, 0) << Show(piped);
  EXPECT_EQ(piped.out.find('\x1b'), std::string::npos);
  EXPECT_EQ(Section(piped.out, "IN RECOVERY"), rec);
}

TEST_F(CtlTest, TopUnknownJobAndBadFlags) {
  Start();
  DriveSpike();
  CtlResult r = Run({"top", "--job", "nope", "--once", "--target", tcp_});
  EXPECT_EQ(r.code, 1) << Show(r);
  EXPECT_EQ(r.err, "gnmrctl: NOT_FOUND: no job 'nope'\n");
  EXPECT_EQ(r.out, "");

  r = Run({"top", "--once", "--target", tcp_});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find("--job is required"), std::string::npos) << r.err;
  r = Run({"top", "--job", "j", "--interval", "0", "--target", tcp_});
  EXPECT_EQ(r.code, 2) << Show(r);
  EXPECT_NE(r.err.find("--interval '0'"), std::string::npos) << r.err;
}

// Reads from `fd` into `*out` until `needle` shows up at or after `from` or
// `timeout` passes.
bool ReadUntil(int fd, const std::string& needle, std::string* out,
               std::chrono::milliseconds timeout, size_t from = 0) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (out->find(needle, from) == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    struct pollfd p {
      fd, POLLIN, 0
    };
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n <= 0) return out->find(needle, from) != std::string::npos;  // EIO: the child is gone
    out->append(buf, static_cast<size_t>(n));
  }
  return true;
}

// Starts `gnmrctl top --job j` on a new pseudo-terminal (120x40); returns
// its pid (-1 on failure) and sets `*master`.
pid_t SpawnTopInPty(const std::string& target, int* master) {
  struct winsize ws {};
  ws.ws_col = 120;
  ws.ws_row = 40;
  const pid_t pid = ::forkpty(master, nullptr, nullptr, &ws);
  if (pid == 0) {
    ::execl(GNMRCTL_PATH, GNMRCTL_PATH, "top", "--job", "j", "--interval", "0.2", "--target",
            target.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  return pid;
}

TEST_F(CtlTest, TopLiveInAPtyQuitsOnQAndRestoresTheTerminal) {
  Start();
  DriveSpike();
  struct termios before {};
  int master = -1;
  const pid_t pid = SpawnTopInPty(tcp_, &master);
  ASSERT_GE(pid, 0) << "forkpty";
  ASSERT_EQ(::tcgetattr(master, &before), 0);
  ASSERT_TRUE(before.c_lflag & ICANON);
  ASSERT_TRUE(before.c_lflag & ECHO);

  std::string out;
  // Two frames: the view refreshes on its own.
  ASSERT_TRUE(ReadUntil(master, "IN RECOVERY", &out, std::chrono::seconds(10))) << out;
  const size_t first = out.find("\x1b[H\x1b[2J");
  ASSERT_NE(first, std::string::npos) << out;
  ASSERT_TRUE(ReadUntil(master, "\x1b[H\x1b[2J", &out, std::chrono::seconds(5), first + 1))
      << "no second frame:\n"
      << out;
  EXPECT_EQ(out.rfind("\x1b[?1049h", 0), 0u) << "alternate screen first";

  // The job moves on: the header shows the step rate and the sparklines
  // grow by one GNMR sample per decided step seen.
  for (int64_t step = 11; step <= 13; ++step) {
    Step(rank_.get(), step, {1.0, 1.0, 1.0, 1.0});
    const size_t mark = out.size();
    ASSERT_TRUE(ReadUntil(master, "step " + std::to_string(step) + " ", &out,
                          std::chrono::seconds(5), mark))
        << out.substr(mark);
  }
  ASSERT_TRUE(ReadUntil(master, "EVENTS", &out, std::chrono::seconds(5), out.rfind("step 13 ")));
  const std::string last = out.substr(out.rfind("\x1b[H\x1b[2J"));
  EXPECT_EQ(last.find("rate - "), std::string::npos) << last;
  std::vector<std::string> rows;
  const std::string row_start = "\r\n  layers.1.mlp ";  // a table row naming the unit first
  for (size_t at = 0; (at = last.find(row_start, at)) != std::string::npos; ++at) {
    rows.push_back(last.substr(at + 2, last.find("\r\n", at + 2) - at - 2));
  }
  ASSERT_EQ(rows.size(), 2u) << last;  // in recovery, and the top units
  const std::vector<std::string> f = Fields(rows[1]);
  ASSERT_EQ(f.size(), 7u) << rows[1];
  EXPECT_GE(f[6].size(), 2 * std::string("\u2588").size()) << "sparkline: " << f[6];
  EXPECT_EQ(f[6].rfind("\u2588", 0), 0u) << "the spike is the highest sample: " << f[6];
  // While it runs the terminal is raw: no echo, no line buffering.
  struct termios during {};
  ASSERT_EQ(::tcgetattr(master, &during), 0);
  EXPECT_FALSE(during.c_lflag & ICANON);
  EXPECT_FALSE(during.c_lflag & ECHO);

  const auto sent = std::chrono::steady_clock::now();
  ASSERT_EQ(::write(master, "q", 1), 1);
  ReadUntil(master, "\x1b[?1049l", &out, std::chrono::seconds(2));
  int status = 0;
  pid_t done = 0;
  while ((done = ::waitpid(pid, &status, WNOHANG)) == 0 &&
         std::chrono::steady_clock::now() - sent < std::chrono::seconds(2)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    ::close(master);
    FAIL() << "gnmrctl top did not quit within 2 s of 'q'\n" << out;
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  // Left the alternate screen, showed the cursor, gave back the modes.
  EXPECT_NE(out.find("\x1b[?25h\x1b[?1049l"), std::string::npos) << out;
  struct termios after {};
  ASSERT_EQ(::tcgetattr(master, &after), 0);
  EXPECT_EQ(after.c_lflag, before.c_lflag);
  EXPECT_EQ(after.c_cc[VMIN], before.c_cc[VMIN]);
  ::close(master);
}

TEST_F(CtlTest, TopLiveRestoresTheTerminalOnSigint) {
  Start();
  DriveSpike();
  struct termios before {};
  int master = -1;
  const pid_t pid = SpawnTopInPty(tcp_, &master);
  ASSERT_GE(pid, 0) << "forkpty";
  ASSERT_EQ(::tcgetattr(master, &before), 0);
  std::string out;
  ASSERT_TRUE(ReadUntil(master, "IN RECOVERY", &out, std::chrono::seconds(10))) << out;
  ASSERT_EQ(::write(master, "\x03", 1), 1);  // Ctrl-C: the line discipline sends SIGINT
  ReadUntil(master, "\x1b[?1049l", &out, std::chrono::seconds(2));
  EXPECT_EQ(Wait(pid, std::chrono::seconds(2)), 0);
  EXPECT_NE(out.find("\x1b[?1049l"), std::string::npos) << out;
  struct termios after {};
  ASSERT_EQ(::tcgetattr(master, &after), 0);
  EXPECT_EQ(after.c_lflag, before.c_lflag);
  ::close(master);
}

}  // namespace
}  // namespace gnmr::testing
