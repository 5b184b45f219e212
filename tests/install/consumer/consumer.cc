// A trainer rank using the installed C++ API: no daemon runs, so the plan
// is empty and training goes on (fail-open); prints what it saw.
#include <gnmr/client.h>
#include <gnmr/version.h>

#include <chrono>
#include <cstdio>
#include <vector>

int main(int argc, char** argv) {
  gnmr::ClientOptions o;
  o.target = argc > 1 ? argv[1] : "unix:/nonexistent/gnmrd.sock";
  o.job_id = "consumer";
  o.decision_wait = std::chrono::milliseconds(0);
  auto client = gnmr::Client::Create(o);
  if (!client.ok()) {
    std::printf("create failed: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<float> grad(1000, 0.5f);
  gnmr::TensorRef t;
  t.data = grad.data();
  t.numel = grad.size();
  if (!(*client)->AddUnit("fc1", {t}).ok() || !(*client)->Start().ok()) return 1;
  if (!(*client)->Observe(0).ok()) return 1;
  gnmr::Plan plan = (*client)->PlanFor(0);
  std::printf("gnmr %s c++ consumer: step %lld has_decision=%d skip_step=%d (%s)\n",
              GNMR_VERSION_STRING, static_cast<long long>(plan.step), plan.has_decision,
              plan.skip_step, gnmr::MissReasonName(plan.miss_reason));
  return plan.has_decision ? 1 : 0;
}
