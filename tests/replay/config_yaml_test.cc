// YAML controller configs: every key, errors with file:line, `--set`
// overrides, and rendering back to YAML.
#include "controller/config_yaml.h"

#include <string>

#include <gtest/gtest.h>

#include "controller/types/config_schema.h"

namespace gnmr {
namespace {

std::string ErrorOf(const std::string& yaml) {
  StatusOr<ControllerConfig> c = ParseControllerConfigYaml(yaml, "cfg.yaml");
  EXPECT_FALSE(c.ok()) << "parsed: " << yaml;
  return c.status().message();
}

ControllerConfig NonDefaultConfig() {
  ControllerConfig c;
  c.warmup = 7;
  c.ema_decay = 0.9;
  c.tau = 3.25;
  c.tau_delta = 0.75;
  c.gnmr_floor = 1.25;
  c.short_window = 6;
  c.max_o = 2;
  c.lock_steps = 15;
  c.lag = 0;
  c.entry = EntryTreatment::kSkip;
  c.clip_min_scale = 0.05;
  c.actions = {{"*.mlp.fc1", Action::kClip, 0.2},
               {"lm_head", Action::kSkip, -1.0},
               {"layers.[0-3].*", Action::kResetState, -1.0}};
  return c;
}

TEST(ConfigYaml, ReadsEveryKey) {
  const std::string yaml =
      "warmup: 7\n"
      "ema_decay: 0.9\n"
      "tau: 3.25\n"
      "tau_delta: 0.75\n"
      "gnmr_floor: 1.25\n"
      "short_window: 6\n"
      "max_o: 2\n"
      "lock_steps: 15\n"
      "lag: 0\n"
      "entry: skip\n"
      "clip_min_scale: 0.05\n"
      "actions:\n"
      "  - {pattern: \"*.mlp.fc1\", action: clip, clip_min_scale: 0.2}\n"
      "  - pattern: lm_head\n"
      "    action: skip\n"
      "  - {pattern: \"layers.[0-3].*\", action: reset_state}\n";
  StatusOr<ControllerConfig> c = ParseControllerConfigYaml(yaml, "cfg.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c.value(), NonDefaultConfig());
}

TEST(ConfigYaml, AbsentKeysKeepTheBase) {
  ControllerConfig base;
  base.max_o = 9;
  base.tau = 4.0;
  StatusOr<ControllerConfig> c = ParseControllerConfigYaml("tau: 3\n", "cfg.yaml", base);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->max_o, 9);
  EXPECT_EQ(c->tau, 3.0);
  StatusOr<ControllerConfig> empty = ParseControllerConfigYaml("", "e.yaml");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty.value(), ControllerConfig());
  StatusOr<ControllerConfig> comments = ParseControllerConfigYaml("# nothing\n", "e.yaml");
  ASSERT_TRUE(comments.ok());
  EXPECT_EQ(comments.value(), ControllerConfig());
}

TEST(ConfigYaml, UnknownKeyNamesKeyAndLine) {
  const std::string m = ErrorOf("warmup: 5\n\nmaxo: 3\n");
  EXPECT_EQ(m.rfind("cfg.yaml:3: unknown config key 'maxo' (known: warmup,", 0), 0u) << m;
}

TEST(ConfigYaml, NegativeMaxOIsRejectedAtItsLine) {
  EXPECT_EQ(ErrorOf("tau: 3\nmax_o: -1\n"), "cfg.yaml:2: config key 'max_o' must be >= 0, got -1");
}

TEST(ConfigYaml, ValidationErrorsPointAtTheKey) {
  EXPECT_EQ(ErrorOf("warmup: 5\nema_decay: 1.5\n"),
            "cfg.yaml:2: config key 'ema_decay' must be in (0, 1), got "
            "1.500000");
  EXPECT_EQ(ErrorOf("tau: .inf\n"),
            "cfg.yaml:1: config key 'tau' must be a finite number > 1, got "
            "inf");
  // Nested: the line of the rule's clip_min_scale, not of `actions`.
  EXPECT_EQ(ErrorOf("actions:\n"
                    "  - {pattern: a, action: clip}\n"
                    "  - pattern: b\n"
                    "    clip_min_scale: 2\n"),
            "cfg.yaml:4: config key 'actions[1].clip_min_scale' must be in "
            "[0, 1]");
  // Negative is the wire format's "use the config-wide value" (fuzz seed
  // controller_config_yaml/rule_clip_negative.yaml): not for a file.
  EXPECT_EQ(ErrorOf("actions:\n"
                    "  - {pattern: b, action: clip, clip_min_scale: -0.2}\n"),
            "cfg.yaml:2: config key 'actions[0].clip_min_scale' must be in [0, 1] (leave it out "
            "to use the config-wide clip_min_scale), got '-0.2'");
  EXPECT_EQ(ErrorOf("actions:\n  - {pattern: \"\"}\n"),
            "cfg.yaml:2: config key 'actions[0].pattern' is empty");
}

TEST(ConfigYaml, TypeErrorsNameKeyLineAndValue) {
  EXPECT_EQ(ErrorOf("warmup: 5\ntau: abc\n"),
            "cfg.yaml:2: config key 'tau' must be a number, got 'abc'");
  EXPECT_EQ(ErrorOf("warmup: 2.5\n"),
            "cfg.yaml:1: config key 'warmup' must be a 32-bit integer, got "
            "'2.5'");
  EXPECT_EQ(ErrorOf("max_o: 99999999999\n"),
            "cfg.yaml:1: config key 'max_o' must be a 32-bit integer, got "
            "'99999999999'");
  EXPECT_EQ(ErrorOf("lag: [1, 2]\n"),
            "cfg.yaml:1: config key 'lag' must be a 32-bit integer, got a "
            "list");
  EXPECT_EQ(ErrorOf("lock_steps:\n"),
            "cfg.yaml:1: config key 'lock_steps' must be a 32-bit integer, "
            "got nothing");
  EXPECT_EQ(ErrorOf("entry: maybe\n"),
            "cfg.yaml:1: config key 'entry' must be one of none, clip, skip, "
            "got 'maybe'");
  EXPECT_EQ(ErrorOf("actions: clip\n"),
            "cfg.yaml:1: config key 'actions' must be a list of {pattern, "
            "action, clip_min_scale}, got 'clip'");
  EXPECT_EQ(ErrorOf("actions:\n  - {pattern: a, action: clipp}\n"),
            "cfg.yaml:2: 'actions[0].action' must be one of promote, clip, "
            "skip, reset_state, got 'clipp'");
  EXPECT_EQ(ErrorOf("actions:\n  - {pattern: a, level: 3}\n"),
            "cfg.yaml:2: unknown key 'level' in 'actions[0]' (known: pattern, "
            "action, clip_min_scale)");
  EXPECT_EQ(ErrorOf("actions:\n  - {action: clip}\n"), "cfg.yaml:2: 'actions[0]' has no 'pattern'");
  EXPECT_EQ(ErrorOf("actions:\n  - promote\n"),
            "cfg.yaml:2: 'actions[0]' must be a mapping {pattern, action, "
            "clip_min_scale}, got 'promote'");
}

TEST(ConfigYaml, StructuralErrors) {
  EXPECT_EQ(ErrorOf("- warmup\n"), "cfg.yaml:1: expected a mapping of config keys, got a list");
  EXPECT_EQ(ErrorOf("warmup: 5\nwarmup: 6\n"), "cfg.yaml:2: duplicate config key 'warmup'");
  const std::string syntax = ErrorOf("warmup: 5\nmax_o: [3\n");
  EXPECT_EQ(syntax.rfind("cfg.yaml:", 0), 0u) << syntax;
  EXPECT_NE(syntax.find(": invalid YAML: "), std::string::npos) << syntax;
}

TEST(ConfigYaml, LoadFileReportsMissingFile) {
  StatusOr<ControllerConfig> c = LoadControllerConfigFile("/nonexistent.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(c.status().message().rfind("/nonexistent.yaml: cannot open", 0), 0u);
}

TEST(ConfigYaml, LoadsTheExampleConfig) {
  StatusOr<ControllerConfig> c =
      LoadControllerConfigFile(std::string(GNMR_SOURCE_DIR) + "/examples/configs/replay.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->max_o, 3);
  EXPECT_EQ(c->lock_steps, 10);
  ASSERT_EQ(c->actions.size(), 2u);
  EXPECT_EQ(ResolveAction(*c, "layers.3.mlp.fc1").action, Action::kClip);
  EXPECT_EQ(ResolveAction(*c, "layers.3.mlp.fc1").clip_min_scale, 0.2);
  EXPECT_EQ(ResolveAction(*c, "lm_head").action, Action::kSkip);
  EXPECT_EQ(ResolveAction(*c, "embed").action, Action::kPromote);
}

TEST(ConfigOverride, SetsScalarKeys) {
  ControllerConfig c;
  ASSERT_TRUE(ApplyOverride(&c, "max_o=2").ok());
  ASSERT_TRUE(ApplyOverride(&c, "ema_decay=0.9").ok());
  ASSERT_TRUE(ApplyOverride(&c, " lag = 0").ok());
  ASSERT_TRUE(ApplyOverride(&c, "entry=none").ok());
  EXPECT_EQ(c.max_o, 2);
  EXPECT_EQ(c.ema_decay, 0.9);
  EXPECT_EQ(c.lag, 0);
  EXPECT_EQ(c.entry, EntryTreatment::kNone);
}

TEST(ConfigOverride, ReplacesActionsAsAWhole) {
  ControllerConfig c;
  c.actions = {{"old", Action::kSkip, -1.0}};
  Status s = ApplyOverride(&c, "actions=[{pattern: \"*.fc1\", action: clip}, {pattern: x}]");
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(c.actions.size(), 2u);
  EXPECT_EQ(c.actions[0], (ActionRule{"*.fc1", Action::kClip, -1.0}));
  EXPECT_EQ(c.actions[1], (ActionRule{"x", Action::kPromote, -1.0}));
  ASSERT_TRUE(ApplyOverride(&c, "actions=[]").ok());
  EXPECT_TRUE(c.actions.empty());
}

TEST(ConfigOverride, ErrorsLeaveTheConfigUnchanged) {
  ControllerConfig c;
  c.max_o = 3;
  const ControllerConfig before = c;
  Status s = ApplyOverride(&c, "max_o=-1");
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--set max_o=-1: config key 'max_o' must be >= 0, got -1");
  EXPECT_EQ(
      ApplyOverride(&c, "maxo=1").message().rfind("--set maxo=1: unknown config key 'maxo'", 0),
      0u);
  EXPECT_EQ(ApplyOverride(&c, "max_o").message(), "--set max_o: expected key=value");
  EXPECT_EQ(ApplyOverride(&c, "max_o=").message(), "--set max_o=: empty value for 'max_o'");
  EXPECT_EQ(ApplyOverride(&c, "tau=high").message(),
            "--set tau=high: config key 'tau' must be a number, got 'high'");
  EXPECT_EQ(ApplyOverride(&c, "actions=[{pattern: a, action: nope}]").message(),
            "--set actions=[{pattern: a, action: nope}]: 'actions[0].action' "
            "must be one of promote, clip, skip, reset_state, got 'nope'");
  EXPECT_EQ(ApplyOverride(&c, "actions=[{pattern: a")
                .message()
                .rfind("--set actions=[{pattern: a: invalid YAML value: ", 0),
            0u);
  EXPECT_EQ(c, before);
}

TEST(ConfigRender, RoundTripsEveryKey) {
  const ControllerConfig c = NonDefaultConfig();
  const std::string yaml = ControllerConfigToYaml(c);
  for (const std::string& key : ConfigKeys()) {
    EXPECT_NE(("\n" + yaml).find("\n" + key + ":"), std::string::npos) << key;
  }
  EXPECT_NE(yaml.find("\n  - {pattern: \"*.mlp.fc1\", action: clip, "
                      "clip_min_scale: 0.2}\n"),
            std::string::npos)
      << yaml;
  StatusOr<ControllerConfig> back = ParseControllerConfigYaml(yaml, "r.yaml");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << yaml;
  EXPECT_EQ(back.value(), c);
}

TEST(ConfigRender, DefaultsAreReadableAndRoundTrip) {
  const std::string yaml = ControllerConfigToYaml(ControllerConfig());
  EXPECT_NE(yaml.find("ema_decay: 0.98\n"), std::string::npos) << yaml;
  EXPECT_NE(yaml.find("actions: []\n"), std::string::npos) << yaml;
  StatusOr<ControllerConfig> back = ParseControllerConfigYaml(yaml, "r.yaml");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value(), ControllerConfig());
}

TEST(ConfigRender, QuotesAwkwardPatterns) {
  ControllerConfig c;
  c.ema_decay = 0.1 + 0.2;                                    // not representable in few digits
  c.actions = {{"we\"ird:[x]\\#*{,}'", Action::kClip, 0.3}};  // no space: unit names have none
  StatusOr<ControllerConfig> back = ParseControllerConfigYaml(ControllerConfigToYaml(c), "r.yaml");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value(), c);
}

}  // namespace
}  // namespace gnmr

namespace gnmr {
namespace {

// Keys and values echoed in errors come out escaped: binary bytes from a
// file or a --set cannot reach the terminal raw.
TEST(ConfigErrorsEscaped, YamlAndSetEchoNoRawBytes) {
  StatusOr<ControllerConfig> c = ParseControllerConfigYaml(
      "warmup: 5\n\"k\\e[2J\\a\": 1\nmax_o: \"\\e]0;x\\a\"\n", "cfg.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message().find('\x1b'), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("unknown config key 'k\\x1b[2J\\x07'"), std::string::npos)
      << c.status().message();
  c = ParseControllerConfigYaml("max_o: \"\\e]0;x\\a\"\n", "cfg.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("'\\x1b]0;x\\x07'"), std::string::npos)
      << c.status().message();

  ControllerConfig config;
  Status s = ApplyOverride(&config, "max_o=\x1b[31m\n\x07");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find('\x1b'), std::string::npos) << s.message();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("--set max_o=\\x1b[31m\\x0a\\x07: ", 0), 0u) << s.message();
}

}  // namespace
}  // namespace gnmr
