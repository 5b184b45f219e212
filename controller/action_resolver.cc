#include "controller/action_resolver.h"

namespace gnmr {

ActionResolver::ActionResolver(const ControllerConfig& config)
    : fallback_{Action::kPromote, config.clip_min_scale} {
  rules_.reserve(config.actions.size());
  for (const ActionRule& r : config.actions) {
    rules_.push_back(
        {GlobPattern(r.pattern),
         {r.action, r.clip_min_scale < 0.0 ? config.clip_min_scale : r.clip_min_scale}});
  }
}

ResolvedAction ActionResolver::Resolve(const std::string& unit_name) const {
  for (const Rule& r : rules_) {
    if (r.pattern.Matches(unit_name)) return r.resolved;
  }
  return fallback_;
}

size_t ActionResolver::MemoryBytes() const {
  size_t n = rules_.capacity() * sizeof(Rule);
  for (const Rule& r : rules_) n += r.pattern.MemoryBytes();
  return n;
}

}  // namespace gnmr
