// `gnmrctl status` (the daemon) and `gnmrctl jobs` (its jobs and ranks).
#include <cstdio>
#include <string>

#include "common/text.h"
#include "programs/gnmrctl/admin_client.h"
#include "programs/gnmrctl/commands.h"
#include "programs/gnmrctl/table.h"

namespace gnmr {
namespace cli {
namespace {

using Align = Table::Align;

std::string Join(const google::protobuf::RepeatedPtrField<std::string>& items) {
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "-" : out;
}

// Lines of `text`, without their newlines.
std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    lines.push_back(text.substr(start, nl - start));
  }
  return lines;
}

std::string RanksTable(const v1::JobInfo& job) {
  Table t({{"RANK", Align::kRight},
           {"CONNECTED"},
           {"LAST STEP", Align::kRight},
           {"LAG", Align::kRight},
           {"LAST SEEN", Align::kRight},
           {"NO DECISION", Align::kRight},
           {"CLIENT"}});
  for (const v1::RankInfo& r : job.ranks()) {
    t.AddRow({std::to_string(r.rank()), r.connected() ? "yes" : "no", FormatStep(r.last_step()),
              std::to_string(r.lag_steps()), FormatDuration(r.last_seen_seconds_ago()) + " ago",
              // Steps the job decided since the rank last had a decision.
              std::to_string(r.steps_without_decision()),
              r.client_version().empty() ? "-" : EscapeForLog(r.client_version())});
  }
  return t.rows() == 0 ? "    no ranks registered\n" : t.Render("    ");
}

}  // namespace

int StatusCommand(int argc, char** argv) {
  AdminCommand cmd("status", "gnmrctl status [options]",
                   "Shows the daemon: version, uptime, jobs, open sessions, listen\n"
                   "addresses and state directory.");
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  v1::GetStatusResponse resp;
  const grpc::Status g =
      cmd.client().stub().GetStatus(cmd.client().Context().get(), v1::GetStatusRequest(), &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (cmd.json()) {
    PrintJson(resp);
    return kExitOk;
  }
  std::printf(
      "target:     %s\n"
      "version:    %s\n"
      "uptime:     %s\n"
      "jobs:       %u\n"
      "sessions:   %u\n"
      "listen:     %s\n"
      "state dir:  %s\n",
      cmd.client().target().c_str(), resp.version().c_str(),
      FormatDuration(resp.uptime_seconds()).c_str(), resp.jobs(), resp.sessions(),
      Join(resp.listen()).c_str(), resp.state_dir().empty() ? "-" : resp.state_dir().c_str());
  return kExitOk;
}

int JobsCommand(int argc, char** argv) {
  AdminCommand cmd("jobs", "gnmrctl jobs [--job J] [--ranks] [options]",
                   "Lists the daemon's jobs: world size, ranks connected/registered,\n"
                   "units, last decided step, units in recovery / max_o, admissions,\n"
                   "budget denials and the recovery fraction (unit-steps in recovery\n"
                   "over all unit-steps). --ranks adds each job's ranks below it: last\n"
                   "step reported, lag behind the job's newest step, last seen,\n"
                   "connection, steps decided since its last plan with a decision\n"
                   "(over 20: it trains without GNMR) and client version.");
  std::string only_job;
  bool ranks = false;
  cmd.flags().AddString("job", "J", "only this job", &only_job);
  cmd.flags().AddBool("ranks", "list each job's ranks below it", &ranks);
  if (auto rc = cmd.Start(argc, argv)) return *rc;
  v1::ListJobsResponse resp;
  const grpc::Status g =
      cmd.client().stub().ListJobs(cmd.client().Context().get(), v1::ListJobsRequest(), &resp);
  if (!g.ok()) return cmd.client().Fail(g);
  if (!only_job.empty()) {
    v1::ListJobsResponse filtered;
    for (const v1::JobInfo& j : resp.jobs()) {
      if (j.job_id() == only_job) *filtered.add_jobs() = j;
    }
    if (filtered.jobs().empty()) {
      return cmd.client().Fail(
          grpc::Status(grpc::StatusCode::NOT_FOUND, "no job '" + only_job + "'"));
    }
    resp = std::move(filtered);
  }
  if (cmd.json()) {
    PrintJson(resp);
    return kExitOk;
  }
  if (resp.jobs().empty()) {
    std::printf("no jobs\n");
    return kExitOk;
  }
  Table t({{"JOB"},
           {"WORLD", Align::kRight},
           {"RANKS", Align::kRight},
           {"UNITS", Align::kRight},
           {"LAST STEP", Align::kRight},
           {"RECOVERY", Align::kRight},
           {"ADMITTED", Align::kRight},
           {"DENIED", Align::kRight},
           {"RECOVERY%", Align::kRight}});
  for (const v1::JobInfo& j : resp.jobs()) {
    int connected = 0;
    for (const v1::RankInfo& r : j.ranks()) connected += r.connected() ? 1 : 0;
    t.AddRow({EscapeForLog(j.job_id()), std::to_string(j.world_size()),
              std::to_string(connected) + "/" + std::to_string(j.ranks_size()),
              std::to_string(j.units()), FormatStep(j.last_step()),
              std::to_string(j.in_recovery()) + "/" + std::to_string(j.max_o()),
              std::to_string(j.admissions()), std::to_string(j.denials()),
              FormatPercent(j.recovery_fraction())});
  }
  const std::vector<std::string> lines = SplitLines(t.Render());
  std::string out = lines[0] + "\n";
  for (int i = 0; i < resp.jobs_size(); ++i) {
    out += lines[static_cast<size_t>(i) + 1] + "\n";
    if (ranks) out += RanksTable(resp.jobs(i));
  }
  std::fputs(out.c_str(), stdout);
  return kExitOk;
}

}  // namespace cli
}  // namespace gnmr
