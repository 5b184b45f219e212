// `gnmrctl rewind`: the operator's way out when a job's steps went wrong
// (e.g. a state imported at a far step, or a first report far ahead):
// starts a generation in which reports of any step (or of --to STEP and
// later) are accepted again. docs/limits.md, "Steps".
#include <cstdio>
#include <string>

#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"

namespace gnmr {
namespace cli {

int RewindCommand(int argc, char** argv) {
  AdminCommand cmd("rewind", "gnmrctl rewind --job J [--to STEP] [options]",
                   "Starts a new generation of the job in which its steps start over:\n"
                   "reports of any step are accepted again (with --to, of STEP and\n"
                   "later), as when a trainer restarts from a checkpoint. The units'\n"
                   "history, their locks and the decision sequence stay; every rank\n"
                   "gets the new generation and drops the old one's decisions. Needs\n"
                   "the admin token (--admin-token, --admin-token-file or\n"
                   "$GNMR_ADMIN_TOKEN), or the Unix socket of a daemon without one.");
  cmd.AddJobFlag();
  std::string to_text;
  cmd.flags().AddString("to", "STEP", "the first step accepted after the rewind (default: any)",
                        &to_text);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  int64_t to = 0;
  if (!to_text.empty()) {
    // kMaxStep (controller/types/decision.h): the daemon says so too.
    StatusOr<int64_t> n = ParseIntFlag("to", to_text, 0, (int64_t{1} << 61) - 1);
    if (!n.ok()) return cmd.Usage(n.status().message());
    to = *n;
  }
  v1::RewindJobRequest req;
  req.set_job_id(cmd.job());
  req.set_to_step(to);
  v1::RewindJobResponse resp;
  const grpc::Status g =
      cmd.client().stub().RewindJob(cmd.client().Context(true).get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (cmd.json()) {
    PrintJson(resp);
  } else if (to == 0) {
    std::printf("job %s: rewound (generation %llu): reports of any step are accepted\n",
                cmd.job().c_str(), static_cast<unsigned long long>(resp.generation()));
  } else {
    std::printf(
        "job %s: rewound (generation %llu): reports of step %lld and later are "
        "accepted\n",
        cmd.job().c_str(), static_cast<unsigned long long>(resp.generation()),
        static_cast<long long>(to));
  }
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
