// Client::ObserveUnit (overlap with backward): statistics computed per unit
// before Observe give the very report Observe alone gives. Two local-mode
// clients watch the same buffers over a run with spikes (admissions) and a
// NaN (the same-step guard, a global skip at lag 0): one observes some units
// early (in "backward" order, while the buffers of the others are still being
// written), the other only calls Observe. Norms, plans and digests must
// agree bit for bit. Then the rules: a second ObserveUnit replaces the first,
// SetTensors discards the stored result, MarkInactive wins, errors.
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gnmr/client.h"
#include "gnmr/client_local.h"
#include "gnmr/gnmr_c.h"

namespace gnmr {
namespace {

using std::chrono::milliseconds;

constexpr int kUnits = 4;
constexpr size_t kNumel = 1000;
constexpr int64_t kSteps = 60;

void Fill(std::vector<float>* g, int u, int64_t step) {
  float spike = 1.0f;
  if ((step == 25 && u == 1) || (step == 40 && u == 2)) spike = 30.0f;
  for (size_t i = 0; i < g->size(); ++i) {
    (*g)[i] =
        spike * 0.01f * static_cast<float>((i * 7 + static_cast<size_t>(step) * (3 + u)) % 17 + 1);
  }
  if (step == 50 && u == 3) (*g)[11] = std::numeric_limits<float>::quiet_NaN();
}

TensorRef Ref(std::vector<float>& g) {
  TensorRef t;
  t.data = g.data();
  t.numel = g.size();
  return t;
}

std::unique_ptr<Client> MakeClient(const std::string& job, std::vector<std::vector<float>>* g,
                                   int32_t lag) {
  EnableLocalTarget();
  ClientOptions o;
  o.target = "local";
  o.job_id = job;
  o.decision_wait = milliseconds(10000);
  ControllerConfig c;
  c.warmup = 5;
  c.max_o = 1;
  c.lock_steps = 10;
  c.lag = lag;
  o.config = c;
  StatusOr<std::unique_ptr<Client>> r = Client::Create(o);
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return nullptr;
  for (int u = 0; u < kUnits; ++u) {
    EXPECT_TRUE((*r)->AddUnit("layers." + std::to_string(u), {Ref((*g)[u])}).ok());
  }
  EXPECT_TRUE((*r)->Start().ok());
  return std::move(r).value();
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

class ObserveUnitTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(ObserveUnitTest, ReportsNormsAndPlansAreBitIdenticalToObserve) {
  const int32_t lag = GetParam();
  std::vector<std::vector<float>> plain(kUnits, std::vector<float>(kNumel));
  std::vector<std::vector<float>> early(kUnits, std::vector<float>(kNumel));
  auto a = MakeClient("plain-" + std::to_string(lag), &plain, lag);
  auto b = MakeClient("early-" + std::to_string(lag), &early, lag);
  ASSERT_TRUE(a && b);
  int admitted = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    for (int u = 0; u < kUnits; ++u) Fill(&plain[u], u, step);
    // Backward order (last layer first); units 3, 2 and 0 are observed as
    // they are written, unit 1 is left to Observe, as a unit without a hook.
    for (int u = kUnits - 1; u >= 0; --u) {
      Fill(&early[u], u, step);
      if (u != 1) {
        ASSERT_TRUE(b->ObserveUnit(static_cast<UnitHandle>(u)).ok());
      }
    }
    ASSERT_TRUE(a->Observe(step).ok());
    ASSERT_TRUE(b->Observe(step).ok());
    const std::vector<double> na = a->UnitNorms(step);
    const std::vector<double> nb = b->UnitNorms(step);
    ASSERT_EQ(na.size(), nb.size());
    for (size_t u = 0; u < na.size(); ++u) {
      EXPECT_TRUE(SameBits(na[u], nb[u])) << "step " << step << " unit " << u;
    }
    const Plan pa = a->PlanFor(step);
    const Plan pb = b->PlanFor(step);
    SCOPED_TRACE("step " + std::to_string(step));
    EXPECT_EQ(pa.has_decision, pb.has_decision);
    EXPECT_EQ(pa.digest, pb.digest);
    EXPECT_EQ(pa.nonfinite_observed, pb.nonfinite_observed);
    EXPECT_EQ(pa.skip_step, pb.skip_step);
    ASSERT_EQ(pa.entries.size(), pb.entries.size());
    for (size_t i = 0; i < pa.entries.size(); ++i) {
      EXPECT_EQ(pa.entries[i].unit, pb.entries[i].unit);
      EXPECT_EQ(pa.entries[i].action, pb.entries[i].action);
      EXPECT_TRUE(SameBits(pa.entries[i].norm, pb.entries[i].norm));
      EXPECT_TRUE(SameBits(pa.entries[i].scale, pb.entries[i].scale));
    }
    admitted += static_cast<int>(pa.entries.size());
    ASSERT_TRUE(a->Ack(pa).ok());
    ASSERT_TRUE(b->Ack(pb).ok());
    if (step == 50) {
      EXPECT_TRUE(pb.nonfinite_observed);
    }
  }
  EXPECT_GT(admitted, 0) << "the spikes should put units into recovery";
}

INSTANTIATE_TEST_SUITE_P(Lags, ObserveUnitTest, ::testing::Values(0, 1));

// One unit, driven by hand: which memory the stored result comes from.
class ObserveUnitRules : public ::testing::Test {
 protected:
  void SetUp() override {
    EnableLocalTarget();
    ClientOptions o;
    o.target = "local";
    o.job_id = "rules";
    auto r = Client::Create(o);
    ASSERT_TRUE(r.ok());
    c_ = std::move(r).value();
    u_ = c_->AddUnit("fc", {Ref(g_)}).value();
    ASSERT_EQ(c_->ObserveUnit(u_).code(), StatusCode::kFailedPrecondition);
    ASSERT_TRUE(c_->Start().ok());
  }
  double NormAt(int64_t step) {
    EXPECT_TRUE(c_->Observe(step).ok());
    return c_->UnitNorms(step)[u_];
  }
  std::vector<float> g_ = std::vector<float>(16, 1.0f);      // norm 4
  std::vector<float> other_ = std::vector<float>(16, 2.0f);  // norm 8
  std::unique_ptr<Client> c_;
  UnitHandle u_ = 0;
};

TEST_F(ObserveUnitRules, StoredResultIsOfTheMemoryAtTheCall) {
  ASSERT_TRUE(c_->ObserveUnit(u_).ok());
  g_.assign(16, 3.0f);  // changed after the call: not seen (documented)
  EXPECT_EQ(NormAt(0), 4.0);
  EXPECT_EQ(NormAt(1), 12.0) << "the stored result is used once";
}

TEST_F(ObserveUnitRules, LaterCallReplacesEarlier) {
  ASSERT_TRUE(c_->ObserveUnit(u_).ok());
  g_.assign(16, 3.0f);  // the next micro-batch accumulated
  ASSERT_TRUE(c_->ObserveUnit(u_).ok());
  EXPECT_EQ(NormAt(0), 12.0);
}

TEST_F(ObserveUnitRules, SetTensorsDiscardsTheStoredResult) {
  ASSERT_TRUE(c_->ObserveUnit(u_).ok());
  ASSERT_TRUE(c_->SetTensors(u_, {Ref(other_)}).ok());
  EXPECT_EQ(NormAt(0), 8.0);
}

TEST_F(ObserveUnitRules, MarkInactiveWins) {
  ASSERT_TRUE(c_->ObserveUnit(u_).ok());
  ASSERT_TRUE(c_->MarkInactive(u_).ok());
  EXPECT_EQ(NormAt(0), 0.0);
  EXPECT_EQ(NormAt(1), 4.0);
}

TEST_F(ObserveUnitRules, UnknownUnitAndCApi) {
  EXPECT_EQ(c_->ObserveUnit(7).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gnmr_observe_unit(nullptr, 0), GNMR_EINVALID_ARGUMENT);
}

}  // namespace
}  // namespace gnmr
