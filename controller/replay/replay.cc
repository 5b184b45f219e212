#include "controller/replay/replay.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstring>

#include "common/text.h"

namespace gnmr {
namespace {

constexpr size_t kFlushBytes = 64 * 1024;

void AppendNumberOrNull(std::string* out, double v) {
  if (std::isfinite(v)) {
    AppendDouble(out, v);
  } else {
    out->append("null");
  }
}

void AppendNames(const std::vector<uint32_t>& ids, const Controller& c, std::string* out) {
  out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(out, c.unit(ids[i]).name);
  }
  out->push_back(']');
}

const RecoveryEntry* FindEntry(const std::vector<RecoveryEntry>& set, uint32_t id) {
  auto it = std::lower_bound(set.begin(), set.end(), id,
                             [](const RecoveryEntry& e, uint32_t x) { return e.unit_id < x; });
  return it != set.end() && it->unit_id == id ? &*it : nullptr;
}

}  // namespace

Status FileSink::Write(std::string_view bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), f_) != bytes.size()) {
    return DataLoss(name_ + ": write error: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status FileSink::Flush() {
  if (std::fflush(f_) != 0) {
    return DataLoss(name_ + ": write error: " + std::strerror(errno));
  }
  return Status::Ok();
}

Status OstreamSink::Write(std::string_view bytes) {
  os_.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!os_) return DataLoss("output stream: write error");
  return Status::Ok();
}

void AppendDecisionJson(const Decision& d, const Controller& c, std::string* out) {
  out->append("{\"observed_step\":");
  AppendInt(out, d.observed_step);
  out->append(",\"apply_step\":");
  AppendInt(out, d.apply_step);
  out->append(",\"admitted\":[");
  for (size_t i = 0; i < d.admitted.size(); ++i) {
    const Admission& a = d.admitted[i];
    const RecoveryEntry* e = FindEntry(d.recovery, a.unit_id);
    if (i > 0) out->push_back(',');
    out->append("{\"unit\":");
    AppendJsonString(out, c.unit(a.unit_id).name);
    out->append(",\"action\":\"");
    out->append(e != nullptr ? ActionName(e->action) : "unknown");
    out->append("\",\"until\":");
    AppendInt(out, e != nullptr ? e->until : d.apply_step);
    out->append(",\"trigger\":\"");
    out->append(TriggerName(a.trigger));
    const bool evaluated = a.trigger != Trigger::kNonFinite;
    out->append("\",\"gnmr\":");
    AppendNumberOrNull(out, evaluated ? a.gnmr : NAN);
    out->append(",\"delta\":");
    AppendNumberOrNull(out, evaluated ? a.delta : NAN);
    // The forward channel's figures, only when it evaluated the sample:
    // a trace without forward columns replays to the lines it always did.
    const ForwardEvidence& f = a.forward;
    if (f.fwd_ratio != 0.0 || f.saturation_ratio != 0.0 || f.underflow_ratio != 0.0) {
      out->append(",\"fwd_ratio\":");
      AppendNumberOrNull(out, f.fwd_ratio);
      out->append(",\"saturation_ratio\":");
      AppendNumberOrNull(out, f.saturation_ratio);
      out->append(",\"underflow_ratio\":");
      AppendNumberOrNull(out, f.underflow_ratio);
    }
    if (f.bwd_ratio != 0.0) {  // the backward channel's B, the same way
      out->append(",\"bwd_ratio\":");
      AppendNumberOrNull(out, f.bwd_ratio);
    }
    out->push_back('}');
  }
  out->append("],\"released\":");
  AppendNames(d.released, c, out);
  out->append(",\"denied\":[");
  for (size_t i = 0; i < d.denied.size(); ++i) {
    if (i > 0) out->push_back(',');
    AppendJsonString(out, c.unit(d.denied[i].unit_id).name);
  }
  // Denied clips (denied: clip) are listed apart, and only when there are
  // any: without them a line is what it was before they existed.
  bool any_clipped = false;
  for (const Denial& x : d.denied) {
    if (!x.clipped) continue;
    out->append(any_clipped ? "," : "],\"denied_clipped\":[");
    any_clipped = true;
    AppendJsonString(out, c.unit(x.unit_id).name);
  }
  out->append("],\"in_recovery\":[");
  bool first = true;
  for (const RecoveryEntry& e : d.recovery) {
    if (e.denied_clip) continue;  // holds no budget: not in recovery
    if (!first) out->push_back(',');
    first = false;
    AppendJsonString(out, c.unit(e.unit_id).name);
  }
  out->append("],\"global_skip\":");
  out->append(d.global_skip ? "true" : "false");
  out->append("}\n");
}

Status ObserveTraceStep(const TraceReader& reader, const TraceStep& step, Controller* controller,
                        Decision* out) {
  // Units are registered in first-appearance order, so the controller's
  // ids equal the reader's.
  while (controller->num_units() < reader.num_units()) {
    const uint32_t id = static_cast<uint32_t>(controller->num_units());
    StatusOr<uint32_t> added = controller->AddUnit(std::string(reader.unit_name(id)));
    if (!added.ok()) {
      return InvalidArgument(reader.name() + ":" + std::to_string(step.first_line) + ": " +
                             added.status().message());
    }
  }
  Status s = controller->Observe(step.step, step.samples.data(), step.samples.size(), out);
  if (!s.ok()) {
    return InvalidArgument(reader.name() + ":" + std::to_string(step.first_line) + ": " +
                           s.message());
  }
  return Status::Ok();
}

StatusOr<ReplaySummary> RunReplay(TraceReader* reader, const ReplayOptions& options,
                                  ByteSink* out) {
  StatusOr<Controller> created = Controller::Create(options.config);
  if (!created.ok()) return created.status();
  Controller& controller = created.value();

  ReplaySummary summary;
  summary.trace = reader->name();
  TraceStep step;
  Decision decision;
  std::string buf;
  buf.reserve(kFlushBytes * 2);
  for (;;) {
    bool got = false;
    GNMR_RETURN_IF_ERROR(reader->Next(&step, &got));
    if (!got) break;
    GNMR_RETURN_IF_ERROR(ObserveTraceStep(*reader, step, &controller, &decision));
    if (summary.steps == 0) summary.first_step = step.step;
    summary.last_step = step.step;
    ++summary.steps;
    if (decision.HasChanges()) {
      AppendDecisionJson(decision, controller, &buf);
      ++summary.decisions_written;
      if (buf.size() >= kFlushBytes) {
        GNMR_RETURN_IF_ERROR(out->Write(buf));
        buf.clear();
      }
    }
    if (options.on_step) {
      options.on_step(
          {summary.steps, reader->rows(), reader->bytes_consumed(), reader->total_bytes()});
    }
  }
  if (!buf.empty()) {
    GNMR_RETURN_IF_ERROR(out->Write(buf));
  }
  GNMR_RETURN_IF_ERROR(out->Flush());
  summary.units = controller.num_units();
  summary.stats = controller.stats();
  return summary;
}

std::string FormatReplaySummary(const ReplaySummary& s) {
  const ControllerStats& st = s.stats;
  const auto& by = st.admissions_by_trigger;
  char buf[1024];
  std::string out;
  std::snprintf(buf, sizeof(buf),
                "replay %s: %" PRIu64 " steps (%" PRId64 "..%" PRId64 "), %" PRIu64
                " units, %" PRIu64 " unit observations\n",
                s.trace.c_str(), s.steps, s.first_step, s.last_step, s.units,
                st.unit_steps_observed);
  out += buf;
  std::snprintf(buf, sizeof(buf),
                "  admissions: %" PRIu64 " (nonfinite %" PRIu64 ", gnmr %" PRIu64 ", delta %" PRIu64
                "); denials: %" PRIu64 "; releases: %" PRIu64 "; global skips: %" PRIu64 "\n",
                st.admissions(), by[static_cast<int>(Trigger::kNonFinite)],
                by[static_cast<int>(Trigger::kGnmr)], by[static_cast<int>(Trigger::kDelta)],
                st.denials, st.releases, st.global_skips);
  out += buf;
  std::snprintf(buf, sizeof(buf),
                "  recovery fraction: %.6g (%" PRIu64 " of %" PRIu64
                " unit-steps in recovery); peak units in recovery: %" PRIu64 "\n",
                st.recovery_fraction(), st.unit_steps_in_force, st.unit_steps_observed,
                st.peak_in_recovery);
  out += buf;
  if (st.forward_samples > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  forward channel: %" PRIu64 " samples; admissions forward %" PRIu64
                  ", saturation %" PRIu64 ", underflow %" PRIu64 "\n",
                  st.forward_samples, by[static_cast<int>(Trigger::kForward)],
                  by[static_cast<int>(Trigger::kSaturation)],
                  by[static_cast<int>(Trigger::kUnderflow)]);
    out += buf;
  }
  const uint64_t block_admissions =
      by[static_cast<int>(Trigger::kBlockSaturation)] + by[static_cast<int>(Trigger::kDeadBlocks)] +
      by[static_cast<int>(Trigger::kScaleClamps)] + by[static_cast<int>(Trigger::kRelativeError)];
  if (block_admissions > 0) {
    std::snprintf(
        buf, sizeof(buf),
        "  block rules: admissions block_saturation %" PRIu64 ", dead_blocks %" PRIu64
        ", scale_clamps %" PRIu64 ", relative_error %" PRIu64 "\n",
        by[static_cast<int>(Trigger::kBlockSaturation)], by[static_cast<int>(Trigger::kDeadBlocks)],
        by[static_cast<int>(Trigger::kScaleClamps)], by[static_cast<int>(Trigger::kRelativeError)]);
    out += buf;
  }
  if (st.backward_samples > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  backward channel: %" PRIu64 " samples; admissions backward %" PRIu64
                  ", backward_saturation %" PRIu64 ", backward_underflow %" PRIu64 "\n",
                  st.backward_samples, by[static_cast<int>(Trigger::kBackward)],
                  by[static_cast<int>(Trigger::kBackwardSaturation)],
                  by[static_cast<int>(Trigger::kBackwardUnderflow)]);
    out += buf;
  }
  if (st.denied_clips > 0) {
    std::snprintf(buf, sizeof(buf),
                  "  denied clips: %" PRIu64 " (of the denials; clipped on their step)\n",
                  st.denied_clips);
    out += buf;
  }
  std::snprintf(buf, sizeof(buf), "  decisions written: %" PRIu64 "\n", s.decisions_written);
  out += buf;
  return out;
}

}  // namespace gnmr
