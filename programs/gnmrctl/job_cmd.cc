// `gnmrctl job delete`: forgets a job on the daemon (Admin.DeleteJob;
// deploy/README.md, "Job lifecycle"). Irreversible, so it asks first: the
// operator types the job id, or passes --yes (scripts; required when stdin
// is not a terminal).
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>

#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"

namespace gnmr {
namespace cli {
namespace {

constexpr char kJobHelp[] =
    "usage: gnmrctl job delete --job J [--yes] [options]\n"
    "\n"
    "Job lifecycle on the daemon (`gnmrctl job delete --help`):\n"
    "  delete   forget a job: end its ranks' streams, remove its snapshots,\n"
    "           event log and metric series (admin)\n"
    "\n"
    "gnmrd also removes a job by itself once it has had no stream and no\n"
    "report for job_idle_expiry (default 7d; deploy/README.md).\n";

// Asks on the terminal; true if the operator typed the job id.
bool Confirmed(const std::string& job) {
  std::fprintf(stderr,
               "Delete job '%s' on the daemon? Its ranks' streams end (a rank still\n"
               "running registers it again as a new job, from an empty state), and its\n"
               "snapshots, event log and metric series are removed for good\n"
               "(`gnmrctl export --job %s` first keeps its controller state).\n"
               "Type the job id to confirm: ",
               job.c_str(), job.c_str());
  std::fflush(stderr);
  std::string answer;
  if (!std::getline(std::cin, answer)) return false;
  while (!answer.empty() && (answer.back() == '\r' || answer.back() == ' ')) answer.pop_back();
  return answer == job;
}

int JobDelete(int argc, char** argv) {
  AdminCommand cmd("job delete", "gnmrctl job delete --job J [--yes] [options]",
                   "Deletes the job on the daemon: its Session streams end with ABORTED\n"
                   "(\"job 'J' was deleted by an operator\"; a rank still running registers\n"
                   "again and starts the job anew, from an empty controller state), and its\n"
                   "snapshots, event log (events.jsonl and events.jsonl.1) and /metrics\n"
                   "series are removed; a restart does not bring it back. Asks for the job\n"
                   "id first unless --yes is given (required when stdin is not a terminal).\n"
                   "Keep the state with `gnmrctl export --job J --out FILE` before. Needs the\n"
                   "admin token (--admin-token, --admin-token-file or $GNMR_ADMIN_TOKEN), or\n"
                   "the Unix socket of a daemon without one.");
  cmd.AddJobFlag();
  bool yes = false;
  cmd.flags().AddBool("yes", "delete without asking", &yes);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  if (!yes) {
    if (::isatty(STDIN_FILENO) == 0) {
      return cmd.Usage("deleting a job cannot be undone: confirm with --yes");
    }
    if (!Confirmed(cmd.job())) {
      PrintError("job delete: not confirmed; job '" + cmd.job() + "' is not deleted");
      return kExitFailure;
    }
  }
  v1::DeleteJobRequest req;
  req.set_job_id(cmd.job());
  v1::DeleteJobResponse resp;
  const grpc::Status g =
      cmd.client().stub().DeleteJob(cmd.client().Context(true).get(), req, &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (cmd.json()) {
    PrintJson(resp);
  } else {
    std::printf(
        "job %s: deleted (%u stream(s) closed; snapshots, event log and metrics "
        "removed)\n",
        cmd.job().c_str(), resp.streams_closed());
  }
  return kExitOk;
}

}  // namespace

int JobCommand(int argc, char** argv) {
  if (argc < 1) {
    std::fputs(kJobHelp, stderr);
    return kExitUsage;
  }
  const std::string sub = argv[0];
  if (sub == "delete") return JobDelete(argc - 1, argv + 1);
  if (sub == "-h" || sub == "--help") {
    std::fputs(kJobHelp, stdout);
    return kExitOk;
  }
  return UsageError("job", "unknown subcommand '" + sub + "': expected delete");
}

}  // namespace cli
}  // namespace gnmr
