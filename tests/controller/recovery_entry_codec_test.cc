#include "controller/types/recovery_entry_codec.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "gnmr/v1/controller.pb.h"
#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {
namespace {

RecoveryEntry Sample() {
  RecoveryEntry e;
  e.unit_id = 7;
  e.action = Action::kSkip;
  e.entry = EntryTreatment::kClip;
  e.since = 100;
  e.until = 120;
  e.clip_min_scale = 0.25;
  e.ref_norm = 3.5;
  e.reason.trigger = Trigger::kSaturation;
  e.reason.gnmr = 1.25;
  e.reason.delta = -0.5;
  e.reason.forward = {1.5, 300.0, -0.25};
  return e;
}

template <typename P>
void ExpectRoundTrip() {
  P p;
  RecoveryEntryToProto(Sample(), &p);
  EXPECT_EQ(RecoveryEntryProblem(p), "");
  const RecoveryEntry back = RecoveryEntryFromProto(p);
  const RecoveryEntry want = Sample();
  EXPECT_EQ(back.unit_id, want.unit_id);
  EXPECT_EQ(back.action, want.action);
  EXPECT_EQ(back.entry, want.entry);
  EXPECT_EQ(back.since, want.since);
  EXPECT_EQ(back.until, want.until);
  EXPECT_EQ(back.clip_min_scale, want.clip_min_scale);
  EXPECT_EQ(back.ref_norm, want.ref_norm);
  EXPECT_EQ(back.reason.trigger, want.reason.trigger);
  EXPECT_EQ(back.reason.gnmr, want.reason.gnmr);
  EXPECT_EQ(back.reason.delta, want.reason.delta);
  EXPECT_EQ(back.reason.forward.fwd_ratio, want.reason.forward.fwd_ratio);
  EXPECT_EQ(back.reason.forward.saturation_ratio, want.reason.forward.saturation_ratio);
  EXPECT_EQ(back.reason.forward.underflow_ratio, want.reason.forward.underflow_ratio);
  // A trigger this build does not know (a newer daemon's) reads as none:
  // the reason is informational, so it never costs the entry.
  p.set_trigger(static_cast<decltype(p.trigger())>(42));
  EXPECT_EQ(RecoveryEntryProblem(p), "");
  EXPECT_EQ(RecoveryEntryFromProto(p).reason.trigger, Trigger::kNone);
}

TEST(RecoveryEntryCodec, BothWireFormsRoundTrip) {
  ExpectRoundTrip<v1::RecoveryEntry>();
  ExpectRoundTrip<v1::RecoveryEntryState>();
}

// The client (decisions) and the state codec (checkpoints) refuse the same
// entries, so each problem is checked on both messages.
template <typename P>
void ExpectEachProblemFound() {
  const auto problem = [](void (*spoil)(P*)) {
    P p;
    RecoveryEntryToProto(Sample(), &p);
    spoil(&p);
    return RecoveryEntryProblem(p);
  };
  EXPECT_NE(problem([](P* p) { p->set_action(static_cast<decltype(p->action())>(99)); }), "");
  EXPECT_NE(problem([](P* p) { p->set_entry(static_cast<decltype(p->entry())>(-1)); }), "");
  EXPECT_NE(problem([](P* p) { p->set_since(-1); }), "");
  EXPECT_NE(problem([](P* p) { p->set_until(p->since()); }), "");
  EXPECT_NE(problem([](P* p) { p->set_until(p->since() + ControllerConfig::kMaxLockSteps + 1); }),
            "");
  EXPECT_NE(problem([](P* p) { p->set_clip_min_scale(1.5); }), "");
  EXPECT_NE(problem([](P* p) { p->set_clip_min_scale(std::nan("")); }), "");
  EXPECT_NE(problem([](P* p) { p->set_ref_norm(-1.0); }), "");
  EXPECT_NE(problem([](P* p) { p->set_ref_norm(std::numeric_limits<double>::infinity()); }), "");
  EXPECT_NE(problem([](P* p) { p->set_gnmr(std::nan("")); }), "");
  EXPECT_NE(problem([](P* p) { p->set_delta(-std::numeric_limits<double>::infinity()); }), "");
  EXPECT_NE(problem([](P* p) { p->set_fwd_ratio(std::numeric_limits<double>::infinity()); }), "");
  EXPECT_NE(problem([](P* p) { p->set_saturation_ratio(std::nan("")); }), "");
  EXPECT_NE(problem([](P* p) { p->set_underflow_ratio(std::nan("")); }), "");
  EXPECT_EQ(problem([](P* p) { p->set_until(p->since() + ControllerConfig::kMaxLockSteps); }), "");
}

TEST(RecoveryEntryCodec, BothWireFormsRefuseTheSameEntries) {
  ExpectEachProblemFound<v1::RecoveryEntry>();
  ExpectEachProblemFound<v1::RecoveryEntryState>();
}

// The controller never publishes a figure a client would refuse.
TEST(RecoveryEntryCodec, ReasonOfWritesNonFiniteFiguresAsZero) {
  Admission a;
  a.trigger = Trigger::kDelta;
  a.gnmr = std::numeric_limits<double>::infinity();
  a.delta = 7.0;
  a.forward = {std::nan(""), 2.0, -std::numeric_limits<double>::infinity()};
  RecoveryEntry e = Sample();
  e.reason = ReasonOf(a);
  EXPECT_EQ(e.reason.trigger, Trigger::kDelta);
  EXPECT_EQ(e.reason.gnmr, 0.0);
  EXPECT_EQ(e.reason.delta, 7.0);
  EXPECT_EQ(e.reason.forward.fwd_ratio, 0.0);
  EXPECT_EQ(e.reason.forward.saturation_ratio, 2.0);
  EXPECT_EQ(e.reason.forward.underflow_ratio, 0.0);
  v1::RecoveryEntry p;
  RecoveryEntryToProto(e, &p);
  EXPECT_EQ(RecoveryEntryProblem(p), "");
}

}  // namespace
}  // namespace gnmr
