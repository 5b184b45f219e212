// The config schema (controller/types/config_schema.h) covers every field of the wire
// config, each row reaches its own member and proto field, and the key
// table of docs/controller.md is the one the schema renders.
#include "controller/types/config_schema.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "controller/types/config_codec.h"

namespace gnmr {
namespace {

using google::protobuf::FieldDescriptor;

ConfigType TypeOfProtoField(const FieldDescriptor& f) {
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return ConfigType::kInt32;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return ConfigType::kDouble;
    case FieldDescriptor::CPPTYPE_ENUM:
      return ConfigType::kEnum;
    default:
      ADD_FAILURE() << f.name() << ": a proto type the schema has no ConfigType for";
      return ConfigType::kInt32;
  }
}

TEST(ConfigSchema, EveryProtoFieldIsAKey) {
  const google::protobuf::Descriptor* d = v1::ControllerConfig::descriptor();
  std::set<std::string> proto_names;
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor& f = *d->field(i);
    proto_names.insert(std::string(f.name()));
    if (f.name() == kActionsKey) {
      EXPECT_TRUE(f.is_repeated());  // the one key with dedicated code
      continue;
    }
    const ConfigField* field = FindConfigField(f.name());
    ASSERT_NE(field, nullptr) << "proto field '" << f.name()
                              << "' has no row in controller/types/config_schema.cc";
    EXPECT_FALSE(f.is_repeated()) << f.name();
    EXPECT_EQ(field->type, TypeOfProtoField(f)) << f.name();
  }
  // And every key is a proto field (the accessors check it at compile
  // time; this keeps ConfigKeys() honest too).
  for (const std::string& key : ConfigKeys()) EXPECT_EQ(proto_names.count(key), 1u) << key;
  EXPECT_EQ(ConfigKeys().size(), proto_names.size());
}

TEST(ConfigSchema, EnumChoicesAreTheProtoEnumInOrder) {
  const google::protobuf::Descriptor* d = v1::ControllerConfig::descriptor();
  for (const ConfigField& f : ConfigFields()) {
    if (f.type != ConfigType::kEnum) continue;
    const google::protobuf::EnumDescriptor* e = d->FindFieldByName(f.key)->enum_type();
    ASSERT_EQ(static_cast<size_t>(e->value_count()), f.choices.size()) << f.key;
    for (size_t i = 0; i < f.choices.size(); ++i) {
      // ENTRY_SKIP <-> "skip" at the same number.
      std::string upper;
      for (char ch : f.choices[i]) upper += static_cast<char>(std::toupper(ch));
      const google::protobuf::EnumValueDescriptor* v = e->FindValueByNumber(static_cast<int>(i));
      ASSERT_NE(v, nullptr) << f.key << " " << i;
      const std::string name(v->name());
      EXPECT_EQ(name.substr(name.size() - upper.size() - 1), "_" + upper) << f.key;
    }
  }
}

// The proto field `f` of `p`, read by reflection (not by the row's accessor).
double ReflectedValue(const v1::ControllerConfig& p, const FieldDescriptor& f) {
  const google::protobuf::Reflection& r = *p.GetReflection();
  switch (f.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return r.GetInt32(p, &f);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return r.GetDouble(p, &f);
    case FieldDescriptor::CPPTYPE_ENUM:
      return r.GetEnumValue(p, &f);
    default:
      return -1;
  }
}

// A valid value other than the default, for each key.
double OtherValue(const ConfigField& f, double current) {
  switch (f.type) {
    case ConfigType::kEnum:
      return current == 0 ? 1 : 0;
    case ConfigType::kInt32:
      return f.Problem(current + 1).empty() ? current + 1 : current - 1;
    case ConfigType::kDouble:
      if (current == 0) return f.Problem(2.0).empty() ? 2.0 : 0.5;  // a rule that is off
      return f.Problem(current * 0.75).empty() ? current * 0.75 : current * 0.5;
  }
  return current;
}

// Each row reads and writes its own member and its own proto field: a
// change to one key differs from the defaults in that key only, on both
// sides of the wire. (`denied: clip` needs lag 0: its row starts there.)
TEST(ConfigSchema, EachRowReachesItsOwnMemberAndProtoField) {
  for (const ConfigField& f : ConfigFields()) {
    ControllerConfig defaults;
    if (std::string(f.key) == "denied") defaults.lag = 0;
    ControllerConfig c = defaults;
    const double v = OtherValue(f, f.get(defaults));
    ASSERT_TRUE(f.Problem(v).empty()) << f.key << ": " << f.Problem(v);
    f.set(&c, v);
    EXPECT_EQ(f.get(c), v) << f.key;
    const std::vector<std::string> diff = DifferingKeys(defaults, c);
    ASSERT_EQ(diff.size(), 1u) << f.key;
    EXPECT_EQ(diff[0].rfind(std::string(f.key) + " (", 0), 0u) << diff[0];

    v1::ControllerConfig p;
    ConfigToProto(c, &p);
    EXPECT_EQ(f.get_proto(p), v) << f.key;
    const google::protobuf::FieldDescriptor* pf =
        v1::ControllerConfig::descriptor()->FindFieldByName(f.key);
    EXPECT_EQ(ReflectedValue(p, *pf), v) << f.key;
    StatusOr<ControllerConfig> back = ConfigFromProto(p);
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(*back, c) << f.key;
  }
}

TEST(ConfigSchema, ProblemsNameTheRangeAsValidateSaysIt) {
  const ConfigField& warmup = *FindConfigField("warmup");
  EXPECT_EQ(warmup.Problem(0), "must be in [1, 1000000], got 0");
  EXPECT_EQ(warmup.Problem(50), "");
  EXPECT_EQ(FindConfigField("tau")->Problem(1.0), "must be a finite number > 1, got 1.000000");
  EXPECT_EQ(FindConfigField("ema_decay")->Problem(HUGE_VAL), "must be in (0, 1), got inf");
  EXPECT_EQ(FindConfigField("max_o")->Problem(-1), "must be >= 0, got -1");
  EXPECT_EQ(FindConfigField("entry")->Problem(3), "must be one of none, clip, skip, got 3");
  // A rule that 0 turns off.
  EXPECT_EQ(FindConfigField("dead_block_fraction")->Problem(1.0),
            "must be 0 (off) or (0, 1), got 1.000000");
  EXPECT_EQ(FindConfigField("dead_block_fraction")->Problem(0.0), "");
  EXPECT_EQ(FindConfigField("tau_block_saturation")->Problem(0.5),
            "must be 0 (off) or a finite number > 1, got 0.500000");
  EXPECT_EQ(FindConfigField("actions"), nullptr);
  EXPECT_EQ(FindConfigField("maxo"), nullptr);

  ControllerConfig c;
  c.entry = static_cast<EntryTreatment>(7);
  EXPECT_EQ(c.Validate().message(), "config key 'entry' must be one of none, clip, skip, got 7");
}

TEST(ConfigSchema, KeysAreTheProtoOrderWithActionsLast) {
  EXPECT_EQ(ConfigKeyList(),
            "warmup, ema_decay, tau, tau_delta, gnmr_floor, short_window, max_o, lock_steps, "
            "lag, entry, denied, clip_min_scale, report, tau_forward, tau_saturation, "
            "underflow_fraction, tau_block_saturation, dead_block_fraction, "
            "scale_clamp_fraction, tau_relative_error, tau_backward, attribution, actions");
  const google::protobuf::Descriptor* d = v1::ControllerConfig::descriptor();
  ASSERT_EQ(static_cast<size_t>(d->field_count()), ConfigKeys().size());
  for (int i = 0; i < d->field_count(); ++i) EXPECT_EQ(d->field(i)->name(), ConfigKeys()[i]);
}

// docs/controller.md holds the table between two marker lines;
// `gnmrctl config keys --markdown` prints it when a key changes.
TEST(ConfigSchema, DocsTableIsCurrent) {
  std::ifstream in(std::string(GNMR_SOURCE_DIR) + "/docs/controller.md");
  ASSERT_TRUE(in) << "cannot read docs/controller.md";
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string doc = ss.str();
  const std::string begin = "<!-- config keys: begin (gnmrctl config keys --markdown) -->\n";
  const std::string end = "<!-- config keys: end -->\n";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "marker missing: " << begin;
  ASSERT_NE(e, std::string::npos) << "marker missing: " << end;
  ASSERT_LT(b, e);
  const std::string table = doc.substr(b + begin.size(), e - b - begin.size());
  EXPECT_EQ(table, ConfigKeysMarkdown())
      << "docs/controller.md's key table is stale: replace it with the output of "
         "`gnmrctl config keys --markdown`";
  for (const ConfigKeyDoc& d : ConfigKeyDocs()) {
    for (const std::string* cell : {&d.type, &d.default_value, &d.range, &d.meaning}) {
      EXPECT_EQ(cell->find('|'), std::string::npos) << d.key << ": " << *cell;
      EXPECT_FALSE(cell->empty()) << d.key;
    }
  }
}

}  // namespace
}  // namespace gnmr
