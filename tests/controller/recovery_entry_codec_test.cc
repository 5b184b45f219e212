#include "core/recovery_entry_codec.h"

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
  EXPECT_EQ(problem([](P* p) { p->set_until(p->since() + ControllerConfig::kMaxLockSteps); }), "");
}

TEST(RecoveryEntryCodec, BothWireFormsRefuseTheSameEntries) {
  ExpectEachProblemFound<v1::RecoveryEntry>();
  ExpectEachProblemFound<v1::RecoveryEntryState>();
}

}  // namespace
}  // namespace gnmr
