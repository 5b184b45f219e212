// The names people read for the wire enums EventKind and UnitState: the
// event log's JSON Lines ("kind":"admission"), gnmrctl's tables and its
// filters (--state recovery). One table per enum, so a kind added to the
// proto without a name here fails the name test (tests/controller/wire_names_test.cc).
#pragma once

#include <string_view>

#include "gnmr/v1/gnmr.pb.h"

namespace gnmr {

struct EventKindNameEntry {
  v1::EventKind kind;
  const char* name;
};

inline constexpr EventKindNameEntry kEventKindNames[] = {
    {v1::EVENT_KIND_ADMISSION, "admission"},
    {v1::EVENT_KIND_RELEASE, "release"},
    {v1::EVENT_KIND_DENIAL, "denial"},
    {v1::EVENT_KIND_GLOBAL_SKIP, "global_skip"},
    {v1::EVENT_KIND_CONFIG_CHANGE, "config_change"},
    {v1::EVENT_KIND_ADMIN_RELEASE, "admin_release"},
    {v1::EVENT_KIND_IMPORT, "import"},
    {v1::EVENT_KIND_GENERATION, "generation"},
    {v1::EVENT_KIND_ACK_MISMATCH, "ack_mismatch"},
    {v1::EVENT_KIND_DECISION_FAILED, "decision_failed"},
    {v1::EVENT_KIND_TRACE_DROPPED, "trace_dropped"},
    {v1::EVENT_KIND_DENIED_CLIP, "denied_clip"},
    {v1::EVENT_KIND_REPLICAS_DIFFER, "replicas_differ"},
    {v1::EVENT_KIND_RANK_WITHOUT_DECISIONS, "rank_without_decisions"},
};

// "unknown" for EVENT_KIND_UNSPECIFIED and values this build does not know.
inline const char* EventKindName(int kind) {
  for (const EventKindNameEntry& e : kEventKindNames) {
    if (e.kind == kind) return e.name;
  }
  return "unknown";
}

// EVENT_KIND_UNSPECIFIED for a name this build does not know (an event log
// written by a newer gnmrd is still read).
inline v1::EventKind EventKindFromName(std::string_view name) {
  for (const EventKindNameEntry& e : kEventKindNames) {
    if (name == e.name) return e.kind;
  }
  return v1::EVENT_KIND_UNSPECIFIED;
}

// Which fields of an event are meaningful (the event log's JSON Lines,
// gnmrctl events and top): admissions and denials (clipped or not) carry
// the statistics behind them; admissions and denied clips also an action.
inline bool EventHasStatistics(int kind) {
  return kind == v1::EVENT_KIND_ADMISSION || kind == v1::EVENT_KIND_DENIAL ||
         kind == v1::EVENT_KIND_DENIED_CLIP;
}
inline bool EventHasAction(int kind) {
  return kind == v1::EVENT_KIND_ADMISSION || kind == v1::EVENT_KIND_DENIED_CLIP;
}

inline const char* UnitStateName(int state) {
  switch (state) {
    case v1::UNIT_STATE_WARMUP:
      return "warmup";
    case v1::UNIT_STATE_ACTIVE:
      return "active";
    case v1::UNIT_STATE_RECOVERY:
      return "recovery";
    default:
      return "unknown";
  }
}

}  // namespace gnmr
