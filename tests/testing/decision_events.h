// DecisionEvents(): the events of decisions in a job's event log file (an
// events.jsonl of gnmrd or of the client's local mode), for tests that
// compare the decisions of two runs: admission, release, denial,
// denied_clip and global_skip, each with time_unix cleared, the only field
// in which two runs of the same decisions may differ.
#pragma once

#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "controller/publish/event_json.h"
#include "controller/publish/wire_names.h"

namespace gnmr::testing {

inline std::vector<v1::Event> DecisionEvents(const std::string& path) {
  std::vector<v1::Event> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    StatusOr<v1::Event> e = ParseEventJsonLine(line);
    EXPECT_TRUE(e.ok()) << line;
    if (!e.ok()) continue;
    const std::string k = EventKindName(e->kind());
    if (k == "admission" || k == "release" || k == "denial" || k == "denied_clip" ||
        k == "global_skip") {
      e->set_time_unix(0);
      out.push_back(*e);
    }
  }
  return out;
}

}  // namespace gnmr::testing
