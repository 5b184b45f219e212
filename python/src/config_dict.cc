#include "python/src/config_dict.h"

#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "controller/types/config_schema.h"

namespace py = pybind11;

namespace gnmr::python {
namespace {

double AsDouble(const py::handle& v, const std::string& key) {
  if (py::isinstance<py::bool_>(v) ||
      !(py::isinstance<py::float_>(v) || py::isinstance<py::int_>(v))) {
    throw py::value_error("config key '" + key + "' must be a number, got " +
                          std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  return v.cast<double>();
}

int32_t AsInt(const py::handle& v, const std::string& key) {
  if (py::isinstance<py::bool_>(v) || !py::isinstance<py::int_>(v)) {
    throw py::value_error("config key '" + key + "' must be an integer, got " +
                          std::string(py::str(py::type::of(v).attr("__name__"))));
  }
  const long long x = v.cast<long long>();
  if (x < INT32_MIN || x > INT32_MAX) {
    throw py::value_error("config key '" + key + "' is out of range: " + std::to_string(x));
  }
  return static_cast<int32_t>(x);
}

std::string AsStr(const py::handle& v, const std::string& key) {
  if (!py::isinstance<py::str>(v)) {
    throw py::value_error("config key '" + key + "' must be a string");
  }
  return v.cast<std::string>();
}

// A scalar key's value, as the schema's double.
double AsField(const ConfigField& f, const py::handle& v) {
  switch (f.type) {
    case ConfigType::kInt32:
      return AsInt(v, f.key);
    case ConfigType::kDouble:
      return AsDouble(v, f.key);
    case ConfigType::kEnum:
      break;
  }
  const std::string s = AsStr(v, f.key);
  double value = 0;
  if (!f.ParseChoice(s, &value)) {
    throw py::value_error("config key '" + std::string(f.key) + "' must be one of " +
                          f.RangeText() + "; got '" + s + "'");
  }
  return value;
}

}  // namespace

ControllerConfig ConfigFromDict(const py::dict& d) {
  ControllerConfig c;
  for (auto item : d) {
    if (!py::isinstance<py::str>(item.first)) {
      throw py::value_error("config keys must be strings");
    }
    const std::string key = item.first.cast<std::string>();
    const py::handle v = item.second;
    if (const ConfigField* f = FindConfigField(key)) {
      f->set(&c, AsField(*f, v));
    } else if (key == kActionsKey) {
      if (!py::isinstance<py::list>(v) && !py::isinstance<py::tuple>(v)) {
        throw py::value_error(
            "config key 'actions' must be a list of {pattern, action[, clip_min_scale]}");
      }
      size_t i = 0;
      for (py::handle r : v) {
        const std::string k = "actions[" + std::to_string(i++) + "]";
        if (!py::isinstance<py::dict>(r)) {
          throw py::value_error("config key '" + k + "' must be a dict");
        }
        ActionRule rule;
        bool has_pattern = false;
        for (auto entry : r.cast<py::dict>()) {
          const std::string fk = py::str(entry.first);
          if (fk == "pattern") {
            rule.pattern = AsStr(entry.second, k + ".pattern");
            has_pattern = true;
          } else if (fk == "action") {
            const std::string a = AsStr(entry.second, k + ".action");
            if (!ParseAction(a, &rule.action)) {
              throw py::value_error("config key '" + k +
                                    ".action' must be one of promote, clip, skip, "
                                    "reset_state; got '" +
                                    a + "'");
            }
          } else if (fk == "clip_min_scale") {
            if (!entry.second.is_none())
              rule.clip_min_scale = AsDouble(entry.second, k + ".clip_min_scale");
          } else {
            throw py::value_error("config key '" + k + "' has unknown field '" + fk +
                                  "' (known: pattern, action, clip_min_scale)");
          }
        }
        if (!has_pattern) throw py::value_error("config key '" + k + "' needs a 'pattern'");
        c.actions.push_back(rule);
      }
    } else {
      throw py::value_error("unknown config key '" + key + "' (known: " + ConfigKeyList() + ")");
    }
  }
  Status s = c.Validate();
  if (!s.ok()) throw py::value_error(s.message());
  return c;
}

py::dict ConfigToDict(const ControllerConfig& c) {
  py::dict d;
  for (const ConfigField& f : ConfigFields()) {
    const double v = f.get(c);
    switch (f.type) {
      case ConfigType::kInt32:
        d[f.key] = static_cast<int32_t>(v);
        break;
      case ConfigType::kDouble:
        d[f.key] = v;
        break;
      case ConfigType::kEnum:
        d[f.key] = f.Render(v);
        break;
    }
  }
  py::list rules;
  for (const ActionRule& r : c.actions) {
    py::dict rd;
    rd["pattern"] = r.pattern;
    rd["action"] = ActionName(r.action);
    if (r.clip_min_scale >= 0.0) rd["clip_min_scale"] = r.clip_min_scale;
    rules.append(rd);
  }
  d[kActionsKey] = rules;
  return d;
}

}  // namespace gnmr::python
