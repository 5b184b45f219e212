// TargetProblem: a target that cannot work is named in the user's terms.
#include "common/target_check.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

std::string Scratch(const char* name) {
  return "/tmp/gnmr-target-check-" + std::to_string(::getpid()) + "-" + name;
}

TEST(TargetProblem, NamesAMissingSocketAndAFileThatIsNotOne) {
  const std::string missing = Scratch("missing.sock");
  const std::string p = TargetProblem("unix:" + missing);
  EXPECT_NE(p.find("ENOENT"), std::string::npos) << p;
  EXPECT_NE(p.find(missing), std::string::npos) << p;
  const std::string file = Scratch("plain");
  std::FILE* f = std::fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  EXPECT_NE(TargetProblem("unix:" + file).find("is not a socket"), std::string::npos);
  ::unlink(file.c_str());
  EXPECT_NE(TargetProblem("unix:").find("empty"), std::string::npos);
}

TEST(TargetProblem, HintsAtUnixForAPathWithoutScheme) {
  const std::string path = Scratch("live.sock");
  ::unlink(path.c_str());
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  EXPECT_EQ(TargetProblem("unix:" + path), "");
  const std::string hint = TargetProblem(path);
  EXPECT_NE(hint.find("did you mean unix:" + path), std::string::npos) << hint;
  ::close(fd);
  ::unlink(path.c_str());
  EXPECT_NE(TargetProblem("/no/such/dir/x.sock").find("unix:/no/such/dir/x.sock"),
            std::string::npos);
}

TEST(TargetProblem, LeavesHostPortAlone) {
  EXPECT_EQ(TargetProblem("localhost:7070"), "");
  EXPECT_EQ(TargetProblem("127.0.0.1:7070"), "");
  EXPECT_EQ(TargetProblem("dns:///gnmrd.example:7070"), "");
}

}  // namespace
}  // namespace gnmr
