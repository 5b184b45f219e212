// An out-of-tree trainer on target "local": links gnmr::gnmr_client_local,
// never calls EnableLocalTarget, and gets decisions from the in-process
// controller. Exits non-zero on any failure.
#include <gnmr/client.h>
#include <gnmr/client_local.h>

#include <cstdio>
#include <vector>

int main() {
  gnmr::ClientOptions o;
  o.target = "local";
  o.job_id = "consumer-local";
  auto c = gnmr::Client::Create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "Create: %s\n", c.status().ToString().c_str());
    return 1;
  }
  std::vector<float> g(32, 0.25f);
  gnmr::TensorRef t;
  t.data = g.data();
  t.numel = g.size();
  if (!(*c)->AddUnit("fc", {t}).ok() || !(*c)->Start().ok()) return 1;
  int decided = 0;
  for (int64_t step = 0; step < 10; ++step) {
    if (!(*c)->Observe(step).ok()) return 1;
    decided += (*c)->PlanFor(step).has_decision;
  }
  if (decided != 9) {  // every step from the default lag (1) on
    std::fprintf(stderr, "consumer_local: %d of 9 steps decided\n", decided);
    return 1;
  }
  std::printf("consumer_local: ok\n");
  return 0;
}
