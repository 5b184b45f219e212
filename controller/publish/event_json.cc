#include "controller/publish/event_json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "common/text.h"
#include "controller/publish/wire_names.h"
#include "controller/types/config_codec.h"
#include "gnmr/config.h"

namespace gnmr {
namespace {

constexpr size_t kMaxIdBytes = 256;
constexpr size_t kMaxKindBytes = 64;
constexpr size_t kMaxDetailBytes = 1024;
constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

// Length of the valid UTF-8 sequence starting at s[i], 0 if invalid.
size_t Utf8SequenceLength(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = byte(0);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the 2nd byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;  // no overlong forms
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(1) < lo || byte(1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(k) < 0x80 || byte(k) > 0xBF) return 0;
  }
  return n;
}

void AppendNumber(std::string* out, double v) {
  if (std::isfinite(v)) {
    // -0 is written as 0: the reader (protobuf's JSON) reads "-0" back as
    // +0, so a rendered line would not render the same twice (a fuzz
    // finding: "mu":-.0).
    AppendDouble(out, v == 0.0 ? 0.0 : v);
  } else {
    out->append("null");
  }
}

void AppendKey(std::string* out, const char* key) {
  out->push_back(',');
  out->push_back('"');
  out->append(key);
  out->append("\":");
}

void AppendNumberField(std::string* out, const char* key, double v) {
  AppendKey(out, key);
  AppendNumber(out, v);
}

void AppendString(std::string* out, const char* key, std::string_view v, size_t max_bytes) {
  AppendKey(out, key);
  AppendJsonString(out, SanitizeUtf8(v, max_bytes));
}

// Action/trigger by name; an out-of-range (open enum) value by number.
template <typename Enum>
void AppendEnum(std::string* out, const char* key, int value, const char* (*name)(Enum),
                bool (*valid)(int)) {
  AppendKey(out, key);
  if (valid(value)) {
    AppendJsonString(out, name(static_cast<Enum>(value)));
  } else {
    AppendInt(out, value);
  }
}

using google::protobuf::Value;

Status TypeError(const std::string& key, const char* want) {
  return InvalidArgument("event key '" + key + "' must be " + want);
}

Status ReadInt64(const std::string& key, const Value& v, int64_t* out) {
  constexpr double kLimit = 9223372036854775807.0;
  if (v.kind_case() != Value::kNumberValue || v.number_value() != std::trunc(v.number_value()) ||
      !(std::fabs(v.number_value()) < kLimit)) {
    return TypeError(key, "an integer");
  }
  *out = static_cast<int64_t>(v.number_value());
  return Status::Ok();
}

Status ReadDouble(const std::string& key, const Value& v, double* out) {
  if (v.kind_case() == Value::kNullValue) {
    *out = std::numeric_limits<double>::quiet_NaN();
  } else if (v.kind_case() == Value::kNumberValue) {
    *out = v.number_value();
  } else {
    return TypeError(key, "a number or null");
  }
  return Status::Ok();
}

// Name, or the number an unknown enum value is written as.
template <typename Enum>
Status ReadEnum(const std::string& key, const Value& v, const char* (*name)(Enum),
                bool (*valid)(int), int* out) {
  if (v.kind_case() == Value::kStringValue) {
    for (int i = 0; valid(i); ++i) {
      if (v.string_value() == name(static_cast<Enum>(i))) {
        *out = i;
        return Status::Ok();
      }
    }
    return TypeError(key, "a known name");
  }
  int64_t n = 0;
  Status s = ReadInt64(key, v, &n);
  if (!s.ok() || n < std::numeric_limits<int32_t>::min() ||
      n > std::numeric_limits<int32_t>::max()) {
    return TypeError(key, "a name or a 32-bit integer");
  }
  *out = static_cast<int>(n);
  return Status::Ok();
}

Status ReadField(const std::string& key, const Value& v, v1::Event* e) {
  int64_t i = 0;
  double d = 0;
  int n = 0;
  Status s;
  if (key == "observed_step" || key == "apply_step" || key == "until") {
    s = ReadInt64(key, v, &i);
    if (key == "observed_step") e->set_observed_step(i);
    if (key == "apply_step") e->set_apply_step(i);
    if (key == "until") e->set_until(i);
  } else if (key == "gnmr" || key == "delta" || key == "norm" || key == "mu" ||
             key == "time_unix" || key == "fwd_ratio" || key == "saturation_ratio" ||
             key == "underflow_ratio" || key == "bwd_ratio") {
    s = ReadDouble(key, v, &d);
    if (key == "gnmr") e->set_gnmr(d);
    if (key == "delta") e->set_delta(d);
    if (key == "norm") e->set_norm(d);
    if (key == "mu") e->set_mu(d);
    if (key == "time_unix") e->set_time_unix(d);
    if (key == "fwd_ratio") e->set_fwd_ratio(d);
    if (key == "saturation_ratio") e->set_saturation_ratio(d);
    if (key == "underflow_ratio") e->set_underflow_ratio(d);
    if (key == "bwd_ratio") e->set_bwd_ratio(d);
  } else if (key == "kind" || key == "unit" || key == "detail") {
    if (v.kind_case() != Value::kStringValue) return TypeError(key, "a string");
    if (key == "kind") e->set_kind(EventKindFromName(v.string_value()));
    if (key == "unit") e->set_unit(v.string_value());
    if (key == "detail") e->set_detail(v.string_value());
  } else if (key == "action") {
    s = ReadEnum<Action>(key, v, &ActionName, &ValidAction, &n);
    e->set_action(static_cast<v1::Action>(n));
  } else if (key == "trigger") {
    s = ReadEnum<Trigger>(key, v, &TriggerName, &ValidTrigger, &n);
    e->set_trigger(static_cast<v1::Trigger>(n));
  }
  return s;  // other keys (job_id, future ones) are ignored
}

}  // namespace

std::string SanitizeUtf8(std::string_view s, size_t max_bytes) {
  std::string out;
  out.reserve(std::min(s.size(), max_bytes));
  for (size_t i = 0; i < s.size();) {
    const size_t n = Utf8SequenceLength(s, i);
    const std::string_view piece = n == 0 ? std::string_view(kReplacement) : s.substr(i, n);
    if (out.size() + piece.size() > max_bytes) break;
    out.append(piece);
    i += n == 0 ? 1 : n;
  }
  return out;
}

void AppendEventJsonLine(std::string_view job_id, const v1::Event& e, std::string* out) {
  out->append("{\"job_id\":");
  AppendJsonString(out, SanitizeUtf8(job_id, kMaxIdBytes));
  AppendKey(out, "observed_step");
  AppendInt(out, e.observed_step());
  AppendKey(out, "apply_step");
  AppendInt(out, e.apply_step());
  AppendString(out, "kind", EventKindName(e.kind()), kMaxKindBytes);
  AppendString(out, "unit", e.unit(), kMaxIdBytes);
  // Only what the kind carries: a release or a global skip has no action,
  // and an event no rule triggered no trigger (a reader takes an absent key
  // as promote / none).
  if (EventHasAction(e.kind())) {
    AppendEnum<Action>(out, "action", e.action(), &ActionName, &ValidAction);
  }
  if (e.trigger() != v1::TRIGGER_NONE) {
    AppendEnum<Trigger>(out, "trigger", e.trigger(), &TriggerName, &ValidTrigger);
  }
  AppendNumberField(out, "gnmr", e.gnmr());
  AppendNumberField(out, "delta", e.delta());
  AppendNumberField(out, "norm", e.norm());
  AppendNumberField(out, "mu", e.mu());
  AppendKey(out, "until");
  AppendInt(out, e.until());
  AppendString(out, "detail", e.detail(), kMaxDetailBytes);
  AppendNumberField(out, "time_unix", e.time_unix());
  AppendNumberField(out, "fwd_ratio", e.fwd_ratio());
  AppendNumberField(out, "saturation_ratio", e.saturation_ratio());
  AppendNumberField(out, "underflow_ratio", e.underflow_ratio());
  // Only when the backward channel judged the sample: every other line
  // stays as it was.
  if (e.bwd_ratio() != 0.0) AppendNumberField(out, "bwd_ratio", e.bwd_ratio());
  out->append("}\n");
}

StatusOr<v1::Event> ParseEventJsonLine(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
    line.remove_suffix(1);
  }
  if (line.size() > kMaxEventLineBytes) {
    return InvalidArgument("event line longer than " + std::to_string(kMaxEventLineBytes) +
                           " bytes");
  }
  google::protobuf::Struct object;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(line.data(), line.size()), &object);
  if (!parsed.ok()) {
    return InvalidArgument("not a JSON object: " + parsed.ToString());
  }
  v1::Event e;
  for (const auto& [key, value] : object.fields()) {
    GNMR_RETURN_IF_ERROR(ReadField(key, value, &e));
  }
  return e;
}

}  // namespace gnmr
