#include "controller/publish/wire_names.h"

#include <set>
#include <string>

#include <gtest/gtest.h>

namespace gnmr {
namespace {

// Every EventKind the proto defines has its own name, and the name reads
// back to the kind: a kind added to gnmr.proto without a name here fails.
TEST(WireNames, EveryEventKindHasAUniqueNameThatReadsBack) {
  const google::protobuf::EnumDescriptor* d = v1::EventKind_descriptor();
  std::set<std::string> names;
  for (int i = 0; i < d->value_count(); ++i) {
    const int kind = d->value(i)->number();
    if (kind == v1::EVENT_KIND_UNSPECIFIED) continue;
    const std::string name = EventKindName(kind);
    EXPECT_NE(name, "unknown") << d->value(i)->name();
    EXPECT_TRUE(names.insert(name).second) << name;
    EXPECT_EQ(EventKindFromName(name), kind) << name;
  }
  EXPECT_STREQ(EventKindName(v1::EVENT_KIND_UNSPECIFIED), "unknown");
  EXPECT_STREQ(EventKindName(9999), "unknown");
  EXPECT_EQ(EventKindFromName("from_a_newer_gnmrd"), v1::EVENT_KIND_UNSPECIFIED);
}

TEST(WireNames, EveryUnitStateHasAName) {
  const google::protobuf::EnumDescriptor* d = v1::UnitState_descriptor();
  for (int i = 0; i < d->value_count(); ++i) {
    const int state = d->value(i)->number();
    if (state == v1::UNIT_STATE_UNSPECIFIED) continue;
    EXPECT_STRNE(UnitStateName(state), "unknown") << d->value(i)->name();
  }
  EXPECT_STREQ(UnitStateName(v1::UNIT_STATE_RECOVERY), "recovery");
}

}  // namespace
}  // namespace gnmr
