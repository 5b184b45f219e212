// gnmr-relay: one per node, between the node's ranks and gnmrd. The ranks
// set their target to the relay's socket; the relay holds one stream to
// gnmrd for all their Sessions (docs/relay.md). Runs until a signal asks
// it to stop (any whose default would end it: SIGTERM, SIGINT, SIGQUIT,
// SIGUSR1, ...; SIGHUP is ignored), then ends its streams (the ranks fail
// open and reconnect) and removes its socket.
#include <chrono>
#include <cstdio>
#include <string>

#include <spdlog/spdlog.h>

#include "common/flag_parser.h"
#include "common/shutdown_signals.h"
#include "relay/relay_server.h"

namespace {

constexpr int kUsageExit = 2;

int Usage(const gnmr::FlagParser& flags, const std::string& why) {
  std::fprintf(stderr, "gnmr-relay: %s\n\n%s", why.c_str(), flags.Help().c_str());
  return kUsageExit;
}

}  // namespace

int main(int argc, char** argv) {
  gnmr::relay::RelayOptions options;
  std::string log_level = "info";
  int64_t max_message_bytes = options.max_message_bytes;
  int64_t max_pending_bytes = static_cast<int64_t>(options.max_pending_bytes);
  gnmr::FlagParser flags("gnmr-relay [--listen unix:PATH] [--upstream ADDR] [options]",
                         "Carries the Session streams of one node's ranks to gnmrd over one\n"
                         "stream (docs/relay.md). Point each rank's target at --listen.");
  flags.AddString("listen", "unix:PATH",
                  "where the node's ranks connect: a Unix socket only\n"
                  "(default unix:/run/gnmr/relay.sock)",
                  &options.listen);
  flags.AddString("upstream", "ADDR",
                  "gnmrd: unix:PATH or host:port\n"
                  "(default unix:/run/gnmr/gnmrd.sock)",
                  &options.upstream);
  flags.AddInt("max-message-bytes", "N",
               "gnmrd's max_message_bytes (default 67108864): a rank\n"
               "message goes up only if it fits, with its token and\n"
               "the lane's framing",
               4097, (int64_t{1} << 31) - 1, &max_message_bytes);
  flags.AddInt("max-pending-bytes", "N",
               "what may wait for gnmrd to read it, each message\n"
               "counting its bytes and 128 more (default 268435456);\n"
               "past it a rank that sends is ended (RESOURCE_EXHAUSTED)",
               1 << 20, int64_t{1} << 40, &max_pending_bytes);
  int64_t reconnect_max_ms = options.reconnect_max.count();
  flags.AddInt("reconnect-max-ms", "MS",
               "longest wait between attempts to reach gnmrd while it\n"
               "is away (default 1000): gnmrd back is noticed within it",
               50, 60000, &reconnect_max_ms);
  gnmr::AddChannelTlsFlags(&flags, &options.tls);  // to a host:port upstream (docs/relay.md)
  flags.AddString("log-level", "LEVEL", "trace, debug, info, warn, error (default info)",
                  &log_level);
  const gnmr::Status parsed = flags.Parse(argc - 1, argv + 1);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (!parsed.ok()) return Usage(flags, parsed.message());
  options.max_message_bytes = static_cast<int>(max_message_bytes);
  options.max_pending_bytes = static_cast<size_t>(max_pending_bytes);
  options.reconnect_max = std::chrono::milliseconds(reconnect_max_ms);
  if (options.listen.empty() || options.upstream.empty()) {
    return Usage(flags, "--listen and --upstream must not be empty");
  }
  const spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  if (level == spdlog::level::off && log_level != "off") {
    return Usage(flags, "unknown --log-level " + log_level);
  }
  spdlog::set_level(level);

  // Signals are taken below, as gnmrd takes them (common/shutdown_signals.h):
  // block them before any thread starts.
  const sigset_t signals = gnmr::BlockStopSignals();

  auto relay = gnmr::relay::RelayServer::Start(options);
  if (!relay.ok()) {
    std::fprintf(stderr, "gnmr-relay: %s\n", relay.status().ToString().c_str());
    return 1;
  }
  spdlog::info(
      "gnmr-relay listening on {}, gnmrd at {}{}", options.listen, options.upstream,
      options.tls.enabled() ? (options.tls.cert_file.empty() ? " (TLS)" : " (mutual TLS)") : "");
  // Said now rather than at the first rank's stream: gnmrd may not be up
  // yet (the relay waits for it), but a TLS setup gnmrd refuses never
  // mends itself, and each rank would meet it alone.
  if (const gnmr::Status reached = (*relay)->CheckUpstream(std::chrono::seconds(5));
      !reached.ok()) {
    spdlog::error("{}; the ranks' streams end UNAVAILABLE until it answers", reached.message());
  }
  const std::string stop = gnmr::WaitForStopSignal(signals, [] {
    spdlog::warn(
        "SIGHUP ignored: gnmr-relay has no config to reload; restart it to change "
        "its options");
  });
  spdlog::info("gnmr-relay: {}, shutting down", stop);
  // The ranks' streams end (they fail open and reconnect), and the socket
  // file goes with the server.
  (*relay)->Shutdown();
  return 0;
}
