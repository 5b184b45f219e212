// gnmr-relay: one per node, between the node's ranks and gnmrd. The ranks
// set their target to the relay's socket; the relay holds one stream to
// gnmrd for all their Sessions (docs/relay.md). Runs until SIGTERM or
// SIGINT, then ends its streams (the ranks fail open and reconnect).
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <spdlog/spdlog.h>

#include "relay/relay_server.h"

namespace {

constexpr char kUsage[] =
    "usage: gnmr-relay [--listen unix:PATH] [--upstream ADDR] [--max-message-bytes N]\n"
    "                  [--log-level LEVEL]\n"
    "\n"
    "Carries the Session streams of one node's ranks to gnmrd over one stream\n"
    "(docs/relay.md). Point each rank's target at --listen.\n"
    "\n"
    "  --listen unix:PATH      where the node's ranks connect: a Unix socket\n"
    "                          only (default unix:/run/gnmr/relay.sock)\n"
    "  --upstream ADDR         gnmrd: unix:PATH or host:port\n"
    "                          (default unix:/run/gnmr/gnmrd.sock)\n"
    "  --max-message-bytes N   gnmrd's max_message_bytes (default 67108864): a\n"
    "                          rank message goes up only if it fits, with its\n"
    "                          token and the lane's framing\n"
    "  --log-level LEVEL       trace, debug, info, warn, error (default info)\n"
    "  -h, --help              this text\n";

int Usage(const std::string& why) {
  std::fprintf(stderr, "gnmr-relay: %s\n\n%s", why.c_str(), kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  gnmr::relay::RelayOptions options;
  std::string log_level = "info";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (arg != "--listen" && arg != "--upstream" && arg != "--max-message-bytes" &&
        arg != "--log-level") {
      return Usage("unknown option " + arg);
    }
    if (i + 1 >= argc) return Usage("missing a value after " + arg);
    const std::string value = argv[++i];
    if (arg == "--listen") {
      options.listen = value;
    } else if (arg == "--upstream") {
      options.upstream = value;
    } else if (arg == "--max-message-bytes") {
      char* end = nullptr;
      const long long n = std::strtoll(value.c_str(), &end, 10);
      if (end == value.c_str() || *end != '\0' || n <= 4096 || n > (1ll << 31) - 1) {
        return Usage("--max-message-bytes must be an integer in (4096, 2^31)");
      }
      options.max_message_bytes = static_cast<int>(n);
    } else {
      log_level = value;  // --log-level
    }
  }
  if (options.listen.empty() || options.upstream.empty()) {
    return Usage("--listen and --upstream must not be empty");
  }
  const spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  if (level == spdlog::level::off && log_level != "off") {
    return Usage("unknown --log-level " + log_level);
  }
  spdlog::set_level(level);

  // Signals are taken by sigwait below: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto relay = gnmr::relay::RelayServer::Start(options);
  if (!relay.ok()) {
    std::fprintf(stderr, "gnmr-relay: %s\n", relay.status().ToString().c_str());
    return 1;
  }
  spdlog::info("gnmr-relay listening on {}, gnmrd at {}", options.listen, options.upstream);
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  spdlog::info("gnmr-relay: {}, shutting down", strsignal(sig));
  (*relay)->Shutdown();
  return 0;
}
