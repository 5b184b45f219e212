#include "gnmr/config.h"

#include <cmath>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

// tau, tau_delta and clip_min_scale come from measurements
// (docs/controller.md, "Defaults and why"); the others kept their first values.
TEST(ControllerConfig, DefaultsAreTheDocumentedDefaults) {
  ControllerConfig c;
  EXPECT_TRUE(c.Validate().ok());
  EXPECT_EQ(c.warmup, 50);
  EXPECT_EQ(c.ema_decay, 0.98);
  EXPECT_EQ(c.tau, 6.0);
  EXPECT_EQ(c.tau_delta, 4.0);
  EXPECT_EQ(c.gnmr_floor, 1.5);
  EXPECT_EQ(c.short_window, 4);
  EXPECT_EQ(c.max_o, 4);
  EXPECT_EQ(c.lock_steps, 20);
  EXPECT_EQ(c.lag, 1);
  EXPECT_EQ(c.entry, EntryTreatment::kClip);
  EXPECT_EQ(c.clip_min_scale, 0.01);
  EXPECT_TRUE(c.actions.empty());
  EXPECT_EQ(ResolvedAction{}.clip_min_scale, c.clip_min_scale);
}

TEST(ControllerConfig, EachBadValueNamesItsKey) {
  struct Case {
    const char* key;
    void (*mutate)(ControllerConfig&);
  };
  const Case cases[] = {
      {"warmup", [](ControllerConfig& c) { c.warmup = 0; }},
      {"ema_decay", [](ControllerConfig& c) { c.ema_decay = 1.0; }},
      {"ema_decay", [](ControllerConfig& c) { c.ema_decay = std::nan(""); }},
      {"tau", [](ControllerConfig& c) { c.tau = 1.0; }},
      {"tau_delta", [](ControllerConfig& c) { c.tau_delta = 0.0; }},
      {"gnmr_floor", [](ControllerConfig& c) { c.gnmr_floor = -1.0; }},
      {"short_window", [](ControllerConfig& c) { c.short_window = 5000; }},
      {"max_o", [](ControllerConfig& c) { c.max_o = -1; }},
      {"lock_steps", [](ControllerConfig& c) { c.lock_steps = 0; }},
      {"lag", [](ControllerConfig& c) { c.lag = -1; }},
      {"clip_min_scale", [](ControllerConfig& c) { c.clip_min_scale = 2.0; }},
      {"actions[0].pattern",
       [](ControllerConfig& c) {
         c.actions = {{"", Action::kClip, -1}};
       }},
      // Found by controller_config_yaml_fuzz: a byte that is not UTF-8 was
      // accepted and rendered back to YAML as another pattern; a job's
      // snapshot with it would not parse (proto3 string).
      {"actions[0].pattern",
       [](ControllerConfig& c) {
         c.actions = {{"lm_head\xff", Action::kClip, -1}};
       }},
      {"actions[0].pattern",
       [](ControllerConfig& c) {
         c.actions = {{"*.fc 1", Action::kClip, -1}};
       }},
      {"actions[0].pattern",
       [](ControllerConfig& c) {
         c.actions = {{"a\nb", Action::kClip, -1}};
       }},
      {"actions[0].clip_min_scale",
       [](ControllerConfig& c) {
         c.actions = {{"x", Action::kClip, 1.5}};
       }},
  };
  for (const Case& k : cases) {
    ControllerConfig c;
    k.mutate(c);
    Status s = c.Validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << k.key;
    EXPECT_NE(s.message().find(std::string("'") + k.key + "'"), std::string::npos) << s.message();
  }
}

TEST(ControllerConfig, NamesRoundTrip) {
  for (Action a : {Action::kPromote, Action::kClip, Action::kSkip, Action::kResetState}) {
    Action back;
    ASSERT_TRUE(ParseAction(ActionName(a), &back));
    EXPECT_EQ(back, a);
  }
  EntryTreatment e;
  EXPECT_TRUE(ParseEntryTreatment("skip", &e));
  EXPECT_EQ(e, EntryTreatment::kSkip);
  Action a;
  EXPECT_FALSE(ParseAction("demote", &a));
  EXPECT_STREQ(TriggerName(Trigger::kNonFinite), "nonfinite");
}

}  // namespace
}  // namespace gnmr
