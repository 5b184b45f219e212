// ActionResolver: a config's action rules compiled once (docs/controller.md,
// "Actions": first matching pattern wins, default promote).
//
// Resolving happens for every unit a job registers and for every unit on a
// config change, under the job's lock, against up to 256 rules of up to
// 1024 bytes: each pattern is compiled once (common/glob.h), so a unit
// costs at most rules x |name| x ceil(positions / 64) word operations,
// never |pattern| x |name| per rule. Not state: derived from the config.
#pragma once

#include <string>
#include <vector>

#include "common/glob.h"
#include "gnmr/config.h"

namespace gnmr {

class ActionResolver {
 public:
  ActionResolver() = default;
  explicit ActionResolver(const ControllerConfig& config);

  // What ResolveAction(config, unit_name) gives.
  ResolvedAction Resolve(const std::string& unit_name) const;

  // Heap bytes of the compiled patterns, for memory accounting.
  size_t MemoryBytes() const;

 private:
  struct Rule {
    GlobPattern pattern;
    ResolvedAction resolved;
  };
  std::vector<Rule> rules_;
  ResolvedAction fallback_;
};

}  // namespace gnmr
