#include "daemon/daemon_config/config_file.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "controller/config_yaml.h"
#include "daemon/daemon_config/config_keys.h"
#include "daemon/daemon_config/config_values.h"

namespace gnmr {
namespace daemon_config {
namespace {

std::string Describe(const YAML::Node& n) { return DescribeYamlNode(n); }

std::string JoinKnown(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// Reads one file's keys into a DaemonConfig; every error names the line
// of the key (or list item) at fault.
class Reader {
 public:
  Reader(std::string source, DaemonConfig* config) : source_(std::move(source)), c_(config) {}

  Status Apply(const YAML::Node& root);
  // A whole document that maps job ids to tokens (job_tokens_file).
  Status JobTokensDocument(const YAML::Node& root) { return JobTokens(root, root); }

 private:
  std::string Where(const YAML::Node& at) const {
    const YAML::Mark m = at.Mark();
    if (m.is_null()) return source_;
    return source_ + ":" + std::to_string(m.line + 1);
  }
  Status Error(const YAML::Node& at, const std::string& key, const std::string& problem) const {
    return InvalidArgument(Where(at) + ": " + key + ": " + problem);
  }

  Status Key(const std::string& key, const YAML::Node& key_node, const YAML::Node& value);
  Status Scalar(const ScalarKey& spec, const YAML::Node& key_node, const YAML::Node& value);
  Status Block(const std::string& key, const YAML::Node& key_node, const YAML::Node& value);
  Status Listen(const YAML::Node& key_node, const YAML::Node& value);
  Status JobTokens(const YAML::Node& key_node, const YAML::Node& value);

  const std::string source_;
  DaemonConfig* const c_;
};

Status Reader::Apply(const YAML::Node& root) {
  if (root.IsNull()) return Status::Ok();  // an empty file: all defaults
  if (!root.IsMap()) {
    return InvalidArgument(Where(root) + ": expected a mapping of keys, got " + Describe(root));
  }
  std::set<std::string> seen;
  for (const auto& kv : root) {
    const std::string key = kv.first.Scalar();
    if (!seen.insert(key).second) return Error(kv.first, key, "duplicate key");
    GNMR_RETURN_IF_ERROR(Key(key, kv.first, kv.second));
  }
  return Status::Ok();
}

Status Reader::Key(const std::string& key, const YAML::Node& key_node, const YAML::Node& value) {
  if (key == "metrics" || key == "tls" || key == "trace") return Block(key, key_node, value);
  Status s;
  if (key == "listen") {
    s = Listen(key_node, value);
  } else if (key == "job_tokens") {
    s = JobTokens(key_node, value);
  } else if (key == "controller") {
    StatusOr<ControllerConfig> cc = ParseControllerConfigNode(value, source_, c_->controller);
    if (cc.ok()) c_->controller = std::move(cc.value());
    s = cc.status();
  } else if (const ScalarKey* spec = FindScalarKey(key)) {
    return Scalar(*spec, key_node, value);
  } else {
    return InvalidArgument(Where(key_node) + ": unknown key '" + key +
                           "' (known: " + JoinKnown(DaemonConfigKeys()) + ")");
  }
  if (s.ok()) c_->origin[key] = Where(key_node);
  return s;
}

Status Reader::Scalar(const ScalarKey& spec, const YAML::Node& key_node, const YAML::Node& value) {
  if (!value.IsScalar()) {
    return Error(key_node, spec.key, "must be a single value, got " + Describe(value));
  }
  Status s = spec.bind(c_)(value.Scalar());
  if (!s.ok()) return Error(key_node, spec.key, s.message());
  c_->origin[spec.key] = Where(key_node);
  return Status::Ok();
}

// "metrics:", "tls:" and "trace:": mappings of dotted scalar keys.
Status Reader::Block(const std::string& key, const YAML::Node& key_node, const YAML::Node& value) {
  std::vector<std::string> known;
  for (const ScalarKey& k : ScalarKeys()) {
    const std::string name = k.key;
    if (name.compare(0, key.size() + 1, key + ".") == 0) {
      known.push_back(name.substr(key.size() + 1));
    }
  }
  if (!value.IsMap()) {
    return Error(key_node, key,
                 "must be a mapping of " + JoinKnown(known) + ", got " + Describe(value));
  }
  std::set<std::string> seen;
  for (const auto& kv : value) {
    const std::string full = key + "." + kv.first.Scalar();
    if (!seen.insert(full).second) return Error(kv.first, full, "duplicate key");
    const ScalarKey* spec = FindScalarKey(full);
    if (spec == nullptr) {
      return Error(kv.first, full, "unknown key (known: " + JoinKnown(known) + ")");
    }
    GNMR_RETURN_IF_ERROR(Scalar(*spec, kv.first, kv.second));
  }
  return Status::Ok();
}

Status Reader::Listen(const YAML::Node& key_node, const YAML::Node& value) {
  std::vector<std::pair<std::string, YAML::Node>> items;
  if (value.IsScalar()) {
    items.emplace_back(value.Scalar(), key_node);
  } else if (value.IsSequence()) {
    for (const YAML::Node& item : value) {
      if (!item.IsScalar()) {
        return Error(item, "listen", "each address must be a string, got " + Describe(item));
      }
      items.emplace_back(item.Scalar(), item);
    }
  } else {
    return Error(key_node, "listen",
                 "must be an address or a list of addresses, got " + Describe(value));
  }
  if (items.empty()) return Error(key_node, "listen", "names no address");
  std::vector<std::string> out;
  for (const auto& [text, at] : items) {
    std::string normalized;
    Status s = ParseListenAddress(text, &normalized);
    if (!s.ok()) return Error(at, "listen", s.message());
    for (const std::string& seen : out) {
      if (seen == normalized) {
        return Error(at, "listen", "'" + text + "' is listed twice");
      }
    }
    out.push_back(normalized);
  }
  c_->listen = std::move(out);
  return Status::Ok();
}

Status Reader::JobTokens(const YAML::Node& key_node, const YAML::Node& value) {
  if (!value.IsMap() && !value.IsNull()) {
    return Error(key_node, "job_tokens", "must map job ids to tokens, got " + Describe(value));
  }
  std::map<std::string, std::string> tokens;
  for (const auto& kv : value) {
    const std::string job = kv.first.Scalar();
    const std::string full = "job_tokens." + job;
    Status s = CheckJobId(job);
    if (!s.ok()) return Error(kv.first, "job_tokens", s.message());
    if (tokens.count(job) != 0) return Error(kv.first, full, "duplicate job");
    if (!kv.second.IsScalar()) {
      return Error(kv.first, full, "token must be a string, got " + Describe(kv.second));
    }
    s = CheckToken(kv.second.Scalar());
    if (!s.ok()) return Error(kv.first, full, s.message());
    tokens[job] = kv.second.Scalar();
  }
  c_->job_tokens = std::move(tokens);
  return Status::Ok();
}

}  // namespace

// The top-level keys: the scalar table's, in its order, with the keys the
// reader handles itself.
const std::vector<std::string>& DaemonConfigKeys() {
  static const std::vector<std::string> kKeys = [] {
    std::vector<std::string> keys = {"listen"};
    for (const ScalarKey& k : ScalarKeys()) {
      const std::string key = k.key;
      const std::string top = key.substr(0, key.find('.'));
      if (top == "job_tokens_file") keys.push_back("job_tokens");
      if (std::find(keys.begin(), keys.end(), top) == keys.end()) keys.push_back(top);
    }
    keys.push_back("controller");
    return keys;
  }();
  return kKeys;
}

std::string AbsolutePath(const std::string& path) {
  if (path.empty() || path[0] == '/') return path;
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  const std::string base = cwd;
  std::string rel = path;
  while (rel.compare(0, 2, "./") == 0) rel.erase(0, 2);
  return (base == "/" ? "" : base) + "/" + rel;
}

Status ApplyConfigText(std::string_view text, const std::string& source, DaemonConfig* config) {
  DaemonConfig copy = *config;  // `config` is unchanged on error
  try {
    Reader reader(source, &copy);
    GNMR_RETURN_IF_ERROR(reader.Apply(YAML::Load(std::string(text))));
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? source : source + ":" + std::to_string(e.mark.line + 1);
    return InvalidArgument(where + ": invalid YAML: " + e.msg);
  } catch (const std::exception& e) {
    return Internal(source + ": " + e.what());
  }
  *config = std::move(copy);
  return Status::Ok();
}

StatusOr<std::map<std::string, std::string>> ReadJobTokensFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  DaemonConfig scratch;
  try {
    const YAML::Node root = YAML::Load(text.str());
    if (root.IsNull()) {
      return InvalidArgument(path + ": names no job (expected lines 'job-id: token')");
    }
    GNMR_RETURN_IF_ERROR(Reader(path, &scratch).JobTokensDocument(root));
  } catch (const YAML::Exception& e) {
    const std::string where =
        e.mark.is_null() ? path : path + ":" + std::to_string(e.mark.line + 1);
    return InvalidArgument(where + ": invalid YAML: " + e.msg);
  }
  return scratch.job_tokens;
}

Status ApplyConfigFile(const std::string& path, DaemonConfig* config) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot open: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return DataLoss(path + ": read error");
  return ApplyConfigText(text.str(), path, config);
}

}  // namespace daemon_config
}  // namespace gnmr
