// Fuzz target: controller state import, the bytes of a gnmr.v1.
// ControllerState as in a snapshot or a `gnmrctl import` file
// (ControllerStateCodec::RestoreFromString, controller/
// state_codec.h), and the same state through Job::ImportState into a live
// job whose rank registered some of the state's units.
//
// Properties, besides no crash and no sanitizer report:
// - a state Restore accepts saves and restores to the same bytes, and the
//   restored controller decides its next steps without error, each with a
//   larger sequence number than the last (a sequence that wraps makes every
//   rank take the decision for an old one);
// - ImportState is all-or-nothing (a refused import leaves the job's state
//   as it was); an accepted one gives a job whose export restores, whose
//   next steps decide (no decision failure) and whose streams and
//   snapshots obey job_harness.h.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "controller/state_codec.h"
#include "daemon/job/job.h"
#include "daemon/server/request_validation.h"
#include "fuzz/fuzz_check.h"
#include "fuzz/job_harness.h"

namespace gnmr::fuzz {
namespace {

constexpr int64_t kNoStep = std::numeric_limits<int64_t>::max() - 16;

// The step after `last` (0 if none), or -1 if there is none to take.
int64_t NextStep(std::optional<int64_t> last) {
  if (!last) return 0;
  return *last < kNoStep ? *last + 1 : -1;
}

// Samples for every unit: mostly calm, one spike and one NaN, so the
// decision admits something.
std::vector<UnitSample> Samples(size_t units, int64_t step) {
  std::vector<UnitSample> out(units);
  for (size_t i = 0; i < units; ++i) {
    out[i].unit_id = static_cast<uint32_t>(i);
    out[i].sumsq = 1.0 + static_cast<double>(i % 3);
    out[i].numel = 16;
  }
  if (units > 0) out[static_cast<size_t>(step) % units].sumsq = 1e6;
  if (units > 1) out[(static_cast<size_t>(step) + 1) % units].sumsq = std::nan("");
  return out;
}

void CheckController(const std::string& bytes) {
  StatusOr<Controller> c = ControllerStateCodec::RestoreFromString(bytes);
  if (!c.ok()) return;
  const std::string saved = ControllerStateCodec::SaveToString(*c);
  StatusOr<Controller> again = ControllerStateCodec::RestoreFromString(saved);
  FUZZ_CHECK(again.ok(), "a saved state does not restore: %s", again.status().ToString().c_str());
  FUZZ_CHECK(ControllerStateCodec::SaveToString(*again) == saved, "save/restore is not stable");

  for (int i = 0; i < 3; ++i) {
    const int64_t step = NextStep(c->last_step());
    if (step < 0) break;
    Decision d;
    const uint64_t sequence = c->sequence();
    Status s = c->Observe(step, Samples(c->num_units(), step), &d);
    FUZZ_CHECK(s.ok(), "restored controller refuses step %lld: %s", static_cast<long long>(step),
               s.ToString().c_str());
    FUZZ_CHECK(d.sequence > sequence, "decision sequence %llu after %llu",
               static_cast<unsigned long long>(d.sequence),
               static_cast<unsigned long long>(sequence));
  }
  FUZZ_CHECK(ControllerStateCodec::RestoreFromString(ControllerStateCodec::SaveToString(*c)).ok(),
             "state after decisions does not restore");
}

void CheckImport(const std::string& bytes) {
  v1::ControllerState state;
  if (!state.ParseFromString(bytes)) return;

  // The job's rank registers the state's first units (all of them, or half
  // for odd-sized inputs: the import then adds the rest), or two others.
  v1::RegisterRequest req;
  req.set_job_id("fuzz-job");
  req.set_world_size(1);
  req.set_instance(1);
  const int n = state.units_size();
  const int k = bytes.size() % 2 == 0 ? n : n / 2;
  for (int i = 0; i < k && i < 64; ++i) req.add_units()->set_name(state.units(i).name());
  if (k == 0 || !ValidateRegister(req).ok()) {
    req.clear_units();
    req.add_units()->set_name("a");
    req.add_units()->set_name("b");
  }
  CheckingListener listener;
  JobOptions options;
  options.snapshot_every_steps = 1;
  StatusOr<std::unique_ptr<Job>> job =
      Job::Create("fuzz-job", 1, "", ControllerConfig(), options, &listener);
  FUZZ_CHECK(job.ok(), "Job::Create: %s", job.status().ToString().c_str());
  StatusOr<RegisterResult> r = (*job)->Register(req);
  if (!r.ok()) return;  // e.g. the same name twice
  auto sink = std::make_shared<CheckingSink>();
  FUZZ_CHECK((*job)->Attach(0, r->session_id, sink).ok(), "attach");

  const std::string before = (*job)->ExportState().SerializeAsString();
  Status s = (*job)->ImportState(state);
  if (!s.ok()) {
    FUZZ_CHECK((*job)->ExportState().SerializeAsString() == before,
               "a refused import changed the job: %s", s.ToString().c_str());
    return;
  }
  const v1::ControllerState exported = (*job)->ExportState();
  StatusOr<Controller> c = ControllerStateCodec::Restore(exported);
  FUZZ_CHECK(c.ok(), "an imported job's state does not restore: %s", c.status().ToString().c_str());

  // The rank reports the steps after the imported state's last one.
  Job::Clock::time_point now(std::chrono::hours(1));
  for (int i = 0; i < 3; ++i) {
    const int64_t step = NextStep((*job)->ExportState().has_last_step()
                                      ? std::optional<int64_t>((*job)->ExportState().last_step())
                                      : std::nullopt);
    if (step < 0) break;
    v1::StepStats stats;
    stats.set_step(step);
    for (const UnitSample& u : Samples(r->unit_ids.size(), step)) {
      stats.add_unit_id(r->unit_ids[u.unit_id]);
      stats.add_sumsq(u.sumsq);
      stats.add_amax(1.0);
      stats.add_nonfinite(0);
      stats.add_zeros(0);
    }
    (void)(*job)->OnStats(0, r->session_id, stats, stats.ByteSizeLong(), now);
    now += std::chrono::seconds(5);
    (*job)->Tick(now);
  }
  FUZZ_CHECK(listener.decision_failures == 0, "the controller refused %llu steps after import",
             static_cast<unsigned long long>(listener.decision_failures));
}

}  // namespace
}  // namespace gnmr::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  gnmr::fuzz::QuietLogs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  gnmr::fuzz::CheckController(bytes);
  gnmr::fuzz::CheckImport(bytes);
  return 0;
}
