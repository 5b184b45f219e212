#include "controller/config_yaml.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <set>

#include <yaml-cpp/yaml.h>

#include "common/text.h"
#include "controller/types/config_schema.h"

namespace gnmr {
namespace {

// Where the text came from: a file (messages carry "file:line: ") or a
// `--set` assignment (messages carry "--set k=v: ", no line).
class Origin {
 public:
  Origin(std::string source, bool has_lines) : source_(std::move(source)), has_lines_(has_lines) {}

  std::string Prefix(const YAML::Mark& m) const {
    if (!has_lines_ || m.is_null()) return source_ + ": ";
    return source_ + ":" + std::to_string(m.line + 1) + ": ";
  }
  Status Error(const YAML::Node& at, const std::string& problem) const {
    return InvalidArgument(Prefix(at.Mark()) + problem);
  }

 private:
  std::string source_;
  bool has_lines_;
};

// Marks of the keys set, by Validate()'s key names ("max_o",
// "actions[0]", "actions[0].pattern"), to place its errors.
using KeyMarks = std::map<std::string, YAML::Mark>;

std::string Describe(const YAML::Node& n) { return DescribeYamlNode(n); }

bool ParseInt32(std::string_view s, int32_t* out) {
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  int64_t v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || r.ec != std::errc() || r.ptr != s.data() + s.size() ||
      v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
    return false;
  }
  *out = static_cast<int32_t>(v);
  return true;
}

bool ParseDouble(std::string_view s, double* out) {
  // YAML spells the special values .inf, -.inf and .nan.
  bool neg = false;
  std::string_view body = s;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    neg = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == ".inf" || body == ".Inf" || body == ".INF") {
    *out = neg ? -HUGE_VAL : HUGE_VAL;
    return true;
  }
  if (s == ".nan" || s == ".NaN" || s == ".NAN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (!s.empty() && s[0] == '+') s.remove_prefix(1);
  auto r = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && r.ec == std::errc() && r.ptr == s.data() + s.size();
}

// An empty value has no mark of its own (yaml-cpp points past it): errors
// about it go to its key's line.
YAML::Node ErrorSite(const YAML::Node& key, const YAML::Node& v) { return v.IsNull() ? key : v; }

Status ReadInt(const Origin& o, const std::string& key, const YAML::Node& at, const YAML::Node& v,
               int32_t* out) {
  if (!v.IsScalar() || !ParseInt32(v.Scalar(), out)) {
    return o.Error(at, "config key '" + key + "' must be a 32-bit integer, got " + Describe(v));
  }
  return Status::Ok();
}

Status ReadDouble(const Origin& o, const std::string& key, const YAML::Node& at,
                  const YAML::Node& v, double* out) {
  if (!v.IsScalar() || !ParseDouble(v.Scalar(), out)) {
    return o.Error(at, "config key '" + key + "' must be a number, got " + Describe(v));
  }
  return Status::Ok();
}

// One scalar key of the schema.
Status ReadField(const Origin& o, const ConfigField& f, const YAML::Node& at, const YAML::Node& v,
                 ControllerConfig* c) {
  const std::string key = f.key;
  double value = 0;
  switch (f.type) {
    case ConfigType::kInt32: {
      int32_t i = 0;
      GNMR_RETURN_IF_ERROR(ReadInt(o, key, at, v, &i));
      value = i;
      break;
    }
    case ConfigType::kDouble: {
      GNMR_RETURN_IF_ERROR(ReadDouble(o, key, at, v, &value));
      break;
    }
    case ConfigType::kEnum:
      if (!v.IsScalar() || !f.ParseChoice(v.Scalar(), &value)) {
        return o.Error(at, "config key '" + key + "' must be one of " + f.RangeText() + ", got " +
                               Describe(v));
      }
      break;
  }
  f.set(c, value);
  return Status::Ok();
}

Status ReadActionRule(const Origin& o, const std::string& key, const YAML::Node& item,
                      ActionRule* rule, KeyMarks* marks) {
  if (!item.IsMap()) {
    return o.Error(item, "'" + key +
                             "' must be a mapping {pattern, action, "
                             "clip_min_scale}, got " +
                             Describe(item));
  }
  (*marks)[key] = item.Mark();
  bool has_pattern = false;
  std::set<std::string> seen;
  for (const auto& kv : item) {
    const std::string k = kv.first.Scalar();
    const YAML::Node& v = kv.second;
    const YAML::Node at = ErrorSite(kv.first, v);
    const std::string full = key + "." + k;
    if (!seen.insert(k).second) {
      return o.Error(kv.first, "duplicate key '" + full + "'");
    }
    (*marks)[full] = at.Mark();
    if (k == "pattern") {
      if (!v.IsScalar()) {
        return o.Error(at, "'" + full + "' must be a string, got " + Describe(v));
      }
      rule->pattern = v.Scalar();
      has_pattern = true;
    } else if (k == "action") {
      if (!v.IsScalar() || !ParseAction(v.Scalar(), &rule->action)) {
        return o.Error(at, "'" + full +
                               "' must be one of promote, clip, skip, "
                               "reset_state, got " +
                               Describe(v));
      }
    } else if (k == "clip_min_scale") {
      GNMR_RETURN_IF_ERROR(ReadDouble(o, full, at, v, &rule->clip_min_scale));
      // A negative value is the "use the config-wide value" mark of the
      // wire format, not a number to write: -0.2 was taken for it, and
      // rendered back without the key (as any other negative), so the
      // config read back differed from the one read.
      if (rule->clip_min_scale < 0.0) {
        return o.Error(at, "config key '" + full + "' must be in [0, 1] (leave it out to use " +
                               "the config-wide clip_min_scale), got " + Describe(v));
      }
    } else {
      return o.Error(kv.first, "unknown key '" + k + "' in '" + key +
                                   "' (known: pattern, action, "
                                   "clip_min_scale)");
    }
  }
  if (!has_pattern) return o.Error(item, "'" + key + "' has no 'pattern'");
  return Status::Ok();
}

Status ReadActions(const Origin& o, const YAML::Node& v, std::vector<ActionRule>* out,
                   KeyMarks* marks) {
  std::vector<ActionRule> rules;
  if (!v.IsNull()) {
    if (!v.IsSequence()) {
      return o.Error(v,
                     "config key 'actions' must be a list of "
                     "{pattern, action, clip_min_scale}, got " +
                         Describe(v));
    }
    for (size_t i = 0; i < v.size(); ++i) {
      ActionRule rule;
      GNMR_RETURN_IF_ERROR(
          ReadActionRule(o, "actions[" + std::to_string(i) + "]", v[i], &rule, marks));
      rules.push_back(std::move(rule));
    }
  }
  *out = std::move(rules);
  return Status::Ok();
}

// Sets one top-level key. `key_node` locates "unknown key" errors.
Status SetKey(const Origin& o, const std::string& key, const YAML::Node& key_node,
              const YAML::Node& v, ControllerConfig* c, KeyMarks* marks) {
  const YAML::Node at = ErrorSite(key_node, v);
  (*marks)[key] = at.Mark();
  if (const ConfigField* f = FindConfigField(key)) return ReadField(o, *f, at, v, c);
  if (key == kActionsKey) return ReadActions(o, v, &c->actions, marks);
  return o.Error(key_node, "unknown config key '" + key + "' (known: " + ConfigKeyList() + ")");
}

// Validates `c`, placing the error at the line of the key it names.
Status ValidateAt(const Origin& o, const ControllerConfig& c, const KeyMarks& marks) {
  Status s = c.Validate();
  if (s.ok()) return s;
  const std::string& m = s.message();
  const std::string lead = "config key '";
  YAML::Mark mark = YAML::Mark::null_mark();
  if (m.compare(0, lead.size(), lead) == 0) {
    std::string key = m.substr(lead.size(), m.find('\'', lead.size()) - lead.size());
    // Most specific first: actions[0].pattern, actions[0], actions.
    while (!key.empty()) {
      auto it = marks.find(key);
      if (it != marks.end()) {
        mark = it->second;
        break;
      }
      const size_t cut = key.find_last_of(".[");
      key = cut == std::string::npos ? "" : key.substr(0, cut);
    }
  }
  return Status(s.code(), o.Prefix(mark) + m);
}

Status ApplyMapping(const Origin& o, const YAML::Node& root, ControllerConfig* c, KeyMarks* marks) {
  if (root.IsNull()) return Status::Ok();  // empty file: all defaults
  if (!root.IsMap()) {
    return o.Error(root, "expected a mapping of config keys, got " + Describe(root));
  }
  std::set<std::string> seen;
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) {
      return o.Error(kv.first, "config keys must be names, got " + Describe(kv.first));
    }
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second) {
      return o.Error(kv.first, "duplicate config key '" + key + "'");
    }
    GNMR_RETURN_IF_ERROR(SetKey(o, key, kv.first, kv.second, c, marks));
  }
  return Status::Ok();
}

// Errors echo keys and values from the file or the command line: escaped
// (EscapeForLog), so binary bytes never reach a terminal or a log raw.
constexpr size_t kMaxMessage = 2048;
Status Printable(const Status& s) {
  return s.ok() ? s : Status(s.code(), EscapeForLog(s.message(), kMaxMessage));
}

Status ApplyOverrideUnescaped(ControllerConfig* config, std::string_view assignment);

}  // namespace

std::string DescribeYamlNode(const YAML::Node& n) {
  switch (n.Type()) {
    case YAML::NodeType::Scalar:
      return "'" + n.Scalar() + "'";
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

StatusOr<ControllerConfig> ParseControllerConfigYaml(std::string_view text,
                                                     const std::string& source,
                                                     const ControllerConfig& base) {
  const Origin origin(source, /*has_lines=*/true);
  try {
    StatusOr<ControllerConfig> c =
        ParseControllerConfigNode(YAML::Load(std::string(text)), source, base);
    if (!c.ok()) return Printable(c.status());
    return c;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(
        EscapeForLog(origin.Prefix(e.mark) + "invalid YAML: " + e.msg, kMaxMessage));
  } catch (const std::exception& e) {
    return Internal(EscapeForLog(source + ": " + e.what(), kMaxMessage));
  }
}

StatusOr<ControllerConfig> ParseControllerConfigNode(const YAML::Node& node,
                                                     const std::string& source,
                                                     const ControllerConfig& base) {
  const Origin origin(source, /*has_lines=*/true);
  try {
    ControllerConfig c = base;
    KeyMarks marks;
    GNMR_RETURN_IF_ERROR(ApplyMapping(origin, node, &c, &marks));
    GNMR_RETURN_IF_ERROR(ValidateAt(origin, c, marks));
    return c;
  } catch (const YAML::Exception& e) {
    return InvalidArgument(origin.Prefix(e.mark) + "invalid YAML: " + e.msg);
  } catch (const std::exception& e) {
    return Internal(source + ": " + e.what());
  }
}

StatusOr<ControllerConfig> LoadControllerConfigFile(const std::string& path,
                                                    const ControllerConfig& base) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return NotFound(path + ": cannot open: " + std::strerror(errno));
  }
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) text.append(buf, n);
  const int err = std::ferror(f) != 0 ? errno : 0;
  std::fclose(f);
  if (err != 0) {
    return InvalidArgument(path + ": cannot read: " + std::strerror(err));
  }
  return ParseControllerConfigYaml(text, path, base);
}

Status ApplyOverride(ControllerConfig* config, std::string_view assignment) {
  return Printable(ApplyOverrideUnescaped(config, assignment));
}

namespace {

Status ApplyOverrideUnescaped(ControllerConfig* config, std::string_view assignment) {
  const std::string what = "--set " + std::string(assignment);
  const Origin origin(what, /*has_lines=*/false);
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos) {
    return InvalidArgument(what + ": expected key=value");
  }
  std::string_view key = assignment.substr(0, eq);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  const std::string value(assignment.substr(eq + 1));
  if (key.empty()) return InvalidArgument(what + ": empty key");
  try {
    const YAML::Node v = YAML::Load(value);
    if (v.IsNull() && key != kActionsKey) {
      return InvalidArgument(what + ": empty value for '" + std::string(key) + "'");
    }
    ControllerConfig c = *config;
    KeyMarks marks;
    GNMR_RETURN_IF_ERROR(SetKey(origin, std::string(key), v, v, &c, &marks));
    GNMR_RETURN_IF_ERROR(ValidateAt(origin, c, marks));
    *config = std::move(c);
    return Status::Ok();
  } catch (const YAML::Exception& e) {
    return InvalidArgument(what + ": invalid YAML value: " + e.msg);
  } catch (const std::exception& e) {
    return Internal(what + ": " + e.what());
  }
}

}  // namespace

std::string ControllerConfigToYaml(const ControllerConfig& c) {
  std::string out;
  for (const ConfigField& f : ConfigFields()) {
    out.append(f.key).append(": ").append(f.Render(f.get(c))).append("\n");
  }
  out += c.actions.empty() ? "actions: []\n" : "actions:\n";
  for (const ActionRule& r : c.actions) {
    out += "  - {pattern: ";
    AppendJsonString(&out, r.pattern);
    out += ", action: ";
    out += ActionName(r.action);
    if (!(r.clip_min_scale < 0.0)) {
      out += ", clip_min_scale: ";
      AppendDouble(&out, r.clip_min_scale);
    }
    out += "}\n";
  }
  return out;
}

}  // namespace gnmr
