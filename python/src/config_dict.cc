#include "python/src/config_dict.h"

#include <string>
#include <vector>

#include <pybind11/stl.h>

namespace py = pybind11;

namespace gnmr::python {
namespace {

const char* const kConfigKeys[] = {
    "warmup", "ema_decay",  "tau", "tau_delta", "gnmr_floor",     "short_window",
    "max_o",  "lock_steps", "lag", "entry",     "clip_min_scale", "actions"};

std::string KeyList() {
  std::string s;
  for (const char* k : kConfigKeys) s += (s.empty() ? "" : ", ") + std::string(k);
  return s;
}

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

}  // namespace

ControllerConfig ConfigFromDict(const py::dict& d) {
  ControllerConfig c;
  for (auto item : d) {
    if (!py::isinstance<py::str>(item.first)) {
      throw py::value_error("config keys must be strings");
    }
    const std::string key = item.first.cast<std::string>();
    const py::handle v = item.second;
    if (key == "warmup")
      c.warmup = AsInt(v, key);
    else if (key == "ema_decay")
      c.ema_decay = AsDouble(v, key);
    else if (key == "tau")
      c.tau = AsDouble(v, key);
    else if (key == "tau_delta")
      c.tau_delta = AsDouble(v, key);
    else if (key == "gnmr_floor")
      c.gnmr_floor = AsDouble(v, key);
    else if (key == "short_window")
      c.short_window = AsInt(v, key);
    else if (key == "max_o")
      c.max_o = AsInt(v, key);
    else if (key == "lock_steps")
      c.lock_steps = AsInt(v, key);
    else if (key == "lag")
      c.lag = AsInt(v, key);
    else if (key == "clip_min_scale")
      c.clip_min_scale = AsDouble(v, key);
    else if (key == "entry") {
      const std::string s = AsStr(v, key);
      if (!ParseEntryTreatment(s, &c.entry)) {
        throw py::value_error("config key 'entry' must be one of none, clip, skip; got '" + s +
                              "'");
      }
    } else if (key == "actions") {
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
        for (auto f : r.cast<py::dict>()) {
          const std::string fk = py::str(f.first);
          if (fk == "pattern") {
            rule.pattern = AsStr(f.second, k + ".pattern");
            has_pattern = true;
          } else if (fk == "action") {
            const std::string a = AsStr(f.second, k + ".action");
            if (!ParseAction(a, &rule.action)) {
              throw py::value_error("config key '" + k +
                                    ".action' must be one of promote, clip, skip, "
                                    "reset_state; got '" +
                                    a + "'");
            }
          } else if (fk == "clip_min_scale") {
            if (!f.second.is_none())
              rule.clip_min_scale = AsDouble(f.second, k + ".clip_min_scale");
          } else {
            throw py::value_error("config key '" + k + "' has unknown field '" + fk +
                                  "' (known: pattern, action, clip_min_scale)");
          }
        }
        if (!has_pattern) throw py::value_error("config key '" + k + "' needs a 'pattern'");
        c.actions.push_back(rule);
      }
    } else {
      throw py::value_error("unknown config key '" + key + "' (known: " + KeyList() + ")");
    }
  }
  Status s = c.Validate();
  if (!s.ok()) throw py::value_error(s.message());
  return c;
}

py::dict ConfigToDict(const ControllerConfig& c) {
  py::dict d;
  d["warmup"] = c.warmup;
  d["ema_decay"] = c.ema_decay;
  d["tau"] = c.tau;
  d["tau_delta"] = c.tau_delta;
  d["gnmr_floor"] = c.gnmr_floor;
  d["short_window"] = c.short_window;
  d["max_o"] = c.max_o;
  d["lock_steps"] = c.lock_steps;
  d["lag"] = c.lag;
  d["entry"] = EntryTreatmentName(c.entry);
  d["clip_min_scale"] = c.clip_min_scale;
  py::list rules;
  for (const ActionRule& r : c.actions) {
    py::dict rd;
    rd["pattern"] = r.pattern;
    rd["action"] = ActionName(r.action);
    if (r.clip_min_scale >= 0.0) rd["clip_min_scale"] = r.clip_min_scale;
    rules.append(rd);
  }
  d["actions"] = rules;
  return d;
}

}  // namespace gnmr::python
