// The C API: thin wrappers over gnmr::Client that turn Status into int
// codes plus a thread-local message, and catch everything.
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "client/src/client_c_internal.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "gnmr/version.h"

namespace gnmr::c_api {

thread_local std::string g_last_error;

int Fail(StatusCode code, const std::string& message) {
  g_last_error = message;
  return static_cast<int>(code);
}

int Report(const Status& s) {
  if (s.ok()) return GNMR_OK;
  return Fail(s.code(), s.message());
}

int Null(const char* what) {
  return Fail(StatusCode::kInvalidArgument, std::string(what) + " is NULL");
}

}  // namespace gnmr::c_api

using gnmr::c_api::Call;
using gnmr::c_api::Fail;
using gnmr::c_api::g_last_error;
using gnmr::c_api::Null;
using gnmr::c_api::Report;

namespace {

// The C enums are the C++ enums' numbers (casts below rely on it).
static_assert(GNMR_DTYPE_FP32 == static_cast<int>(gnmr::DType::kFp32) &&
              GNMR_DTYPE_BF16 == static_cast<int>(gnmr::DType::kBf16) &&
              GNMR_DTYPE_FP16 == static_cast<int>(gnmr::DType::kFp16) &&
              GNMR_DTYPE_FP8_E4M3FN == static_cast<int>(gnmr::DType::kFp8E4M3) &&
              GNMR_DTYPE_FP8_E5M2 == static_cast<int>(gnmr::DType::kFp8E5M2));
static_assert(GNMR_OVERHEAD_HOST_WALL == static_cast<int>(gnmr::OverheadSource::kHostWall) &&
              GNMR_OVERHEAD_CUPTI == static_cast<int>(gnmr::OverheadSource::kCupti) &&
              GNMR_OVERHEAD_UNAVAILABLE == static_cast<int>(gnmr::OverheadSource::kUnavailable));
static_assert(GNMR_ACTION_PROMOTE == static_cast<int>(gnmr::Action::kPromote) &&
              GNMR_ACTION_CLIP == static_cast<int>(gnmr::Action::kClip) &&
              GNMR_ACTION_SKIP == static_cast<int>(gnmr::Action::kSkip) &&
              GNMR_ACTION_RESET_STATE == static_cast<int>(gnmr::Action::kResetState));
static_assert(GNMR_ENTRY_NONE == static_cast<int>(gnmr::EntryTreatment::kNone) &&
              GNMR_ENTRY_CLIP == static_cast<int>(gnmr::EntryTreatment::kClip) &&
              GNMR_ENTRY_SKIP == static_cast<int>(gnmr::EntryTreatment::kSkip));

// What gnmr_get_counters fills: gnmr_counters as the earlier 0.2 header
// declared it, up to forward_calls_dropped. Fields appended since are
// written only where the caller says its struct has them.
constexpr size_t kCountersBaseSize = offsetof(gnmr_counters, attach_failures);
static_assert(kCountersBaseSize ==
              offsetof(gnmr_counters, forward_calls_dropped) + sizeof(uint64_t));

}  // namespace

namespace gnmr::c_api {

void ToRefs(const gnmr_tensor* t, size_t n, std::vector<gnmr::TensorRef>* out) {
  out->resize(n);
  for (size_t i = 0; i < n; ++i) {
    gnmr::TensorRef& r = (*out)[i];
    r = gnmr::TensorRef();
    r.data = t[i].data;
    r.numel = t[i].numel;
    r.dtype = static_cast<gnmr::DType>(t[i].dtype);
    // location: 0 host, k + 1 CUDA device k (zero-initialised = host).
    // A negative location maps below -1: AddUnit rejects it.
    r.device = t[i].location == 0 ? gnmr::kHostDevice : t[i].location - 1;
    r.scale_inv = t[i].scale_inv == 0.0f ? 1.0f : t[i].scale_inv;
    r.scale_inv_ptr = t[i].scale_inv_ptr;
  }
}

}  // namespace gnmr::c_api

using gnmr::c_api::ToRefs;

extern "C" {

const char* gnmr_last_error(void) { return g_last_error.c_str(); }

const char* gnmr_version(void) { return GNMR_VERSION_STRING; }

void gnmr_options_init(gnmr_options* o) {
  if (o == nullptr) return;
  const gnmr::ClientOptions d;  // the defaults are the C++ API's
  *o = gnmr_options();
  o->struct_size = sizeof(gnmr_options);
  o->world_size = d.world_size;
  o->decision_wait_ms = static_cast<int32_t>(d.decision_wait.count());
  o->max_queued_reports = static_cast<uint32_t>(d.max_queued_reports);
  o->backoff_initial_ms = static_cast<int32_t>(d.backoff_initial.count());
  o->backoff_max_ms = static_cast<int32_t>(d.backoff_max.count());
  o->attach_timeout_ms = static_cast<int32_t>(d.attach_timeout.count());
}

int gnmr_client_create(const gnmr_options* o, gnmr_client** out) {
  return Call([&]() -> int {
    if (o == nullptr) return Null("options");
    if (out == nullptr) return Null("out");
    *out = nullptr;
    // 0.1 callers pass the size without profile_gpu_overhead, early 0.2
    // callers the size without admin_token, 0.2 ones without
    // local_events_path, later ones without pipeline_stage, then without
    // attach_timeout_ms (the fields left out keep ClientOptions' defaults).
    constexpr size_t kV01Size = offsetof(gnmr_options, profile_gpu_overhead);
    constexpr size_t kNoAdminTokenSize = offsetof(gnmr_options, admin_token);
    constexpr size_t kNoLocalEventsSize = offsetof(gnmr_options, local_events_path);
    constexpr size_t kNoPipelineStageSize = offsetof(gnmr_options, pipeline_stage);
    constexpr size_t kNoAttachTimeoutSize = offsetof(gnmr_options, attach_timeout_ms);
    if (o->struct_size != sizeof(gnmr_options) && o->struct_size != kV01Size &&
        o->struct_size != kNoAdminTokenSize && o->struct_size != kNoLocalEventsSize &&
        o->struct_size != kNoPipelineStageSize && o->struct_size != kNoAttachTimeoutSize) {
      return Fail(gnmr::StatusCode::kInvalidArgument,
                  "options.struct_size mismatch: call gnmr_options_init");
    }
    gnmr::ClientOptions co;
    co.target = o->target ? o->target : "";
    co.job_id = o->job_id ? o->job_id : "";
    co.rank = o->rank;
    co.world_size = o->world_size;
    co.token = o->token ? o->token : "";
    co.decision_wait = std::chrono::milliseconds(o->decision_wait_ms);
    co.max_queued_reports = o->max_queued_reports;
    co.backoff_initial = std::chrono::milliseconds(o->backoff_initial_ms);
    co.backoff_max = std::chrono::milliseconds(o->backoff_max_ms);
    if (o->struct_size > kV01Size) co.profile_gpu_overhead = o->profile_gpu_overhead != 0;
    if (o->struct_size > kNoAdminTokenSize && o->admin_token != nullptr) {
      co.admin_token = o->admin_token;
    }
    if (o->struct_size > kNoLocalEventsSize && o->local_events_path != nullptr) {
      co.local_events_path = o->local_events_path;
    }
    if (o->struct_size > kNoPipelineStageSize) co.pipeline_stage = o->pipeline_stage;
    if (o->struct_size > kNoAttachTimeoutSize) {
      co.attach_timeout = std::chrono::milliseconds(o->attach_timeout_ms);
    }
    gnmr::StatusOr<std::unique_ptr<gnmr::Client>> c = gnmr::Client::Create(std::move(co));
    if (!c.ok()) return Report(c.status());
    *out = new gnmr_client{std::move(c).value(), {}, {}};
    return GNMR_OK;
  });
}

void gnmr_client_destroy(gnmr_client* c) {
  Call([&]() -> int {
    delete c;
    return GNMR_OK;
  });
}

int gnmr_add_unit(gnmr_client* c, const char* name, const gnmr_tensor* tensors, size_t count,
                  uint32_t shard_index, uint32_t shard_count, uint32_t* unit_out) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (name == nullptr) return Null("name");
    if (tensors == nullptr && count > 0) return Null("tensors");
    std::vector<gnmr::TensorRef> refs;
    ToRefs(tensors, count, &refs);
    gnmr::StatusOr<gnmr::UnitHandle> h = c->client->AddUnit(name, refs, shard_index, shard_count);
    if (!h.ok()) return Report(h.status());
    if (unit_out != nullptr) *unit_out = *h;
    return GNMR_OK;
  });
}

int gnmr_set_tensors(gnmr_client* c, uint32_t unit, const gnmr_tensor* tensors, size_t count) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (tensors == nullptr && count > 0) return Null("tensors");
    ToRefs(tensors, count, &c->scratch);
    return Report(c->client->SetTensors(unit, c->scratch.data(), c->scratch.size()));
  });
}

int gnmr_start(gnmr_client* c) {
  return Call([&]() -> int { return c == nullptr ? Null("client") : Report(c->client->Start()); });
}

int gnmr_observe(gnmr_client* c, int64_t step) {
  return Call(
      [&]() -> int { return c == nullptr ? Null("client") : Report(c->client->Observe(step)); });
}

int gnmr_observe_on_stream(gnmr_client* c, int64_t step, void* stream) {
  return Call([&]() -> int {
    return c == nullptr ? Null("client") : Report(c->client->Observe(step, stream));
  });
}

int gnmr_mark_inactive(gnmr_client* c, uint32_t unit) {
  return Call([&]() -> int {
    return c == nullptr ? Null("client") : Report(c->client->MarkInactive(unit));
  });
}

int gnmr_observe_unit(gnmr_client* c, uint32_t unit) {
  return Call([&]() -> int {
    return c == nullptr ? Null("client") : Report(c->client->ObserveUnit(unit));
  });
}

int gnmr_observe_forward(gnmr_client* c, uint32_t unit, const gnmr_tensor* tensors,
                         const float* saturation_magnitude, size_t count) {
  return gnmr_observe_forward_on_stream(c, unit, tensors, saturation_magnitude, count, nullptr);
}

int gnmr_observe_forward_on_stream(gnmr_client* c, uint32_t unit, const gnmr_tensor* tensors,
                                   const float* saturation_magnitude, size_t count, void* stream) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (tensors == nullptr && count > 0) return Null("tensors");
    ToRefs(tensors, count, &c->scratch);  // called per unit per forward pass: no allocation
    if (saturation_magnitude != nullptr) {
      for (size_t i = 0; i < count; ++i)
        c->scratch[i].saturation_magnitude = saturation_magnitude[i];
    }
    return Report(c->client->ObserveForward(unit, c->scratch.data(), c->scratch.size(), stream));
  });
}

int gnmr_plan_for(gnmr_client* c, int64_t step, gnmr_plan* plan) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (plan == nullptr) return Null("plan");
    c->client->PlanFor(step, &plan->plan);
    return GNMR_OK;
  });
}

int gnmr_ack(gnmr_client* c, const gnmr_plan* plan) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (plan == nullptr) return Null("plan");
    return Report(c->client->Ack(plan->plan));
  });
}

int gnmr_flush(gnmr_client* c, int32_t timeout_ms) {
  return Call([&]() -> int {
    if (c == nullptr) return 0;
    return c->client->Flush(std::chrono::milliseconds(timeout_ms)) ? 1 : 0;
  });
}

int gnmr_get_counters(const gnmr_client* c, gnmr_counters* out) {
  return gnmr_get_counters_sized(c, out, kCountersBaseSize);
}

int gnmr_get_counters_sized(const gnmr_client* c, gnmr_counters* out, size_t size) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (out == nullptr) return Null("out");
    if (size < kCountersBaseSize) {
      return Fail(gnmr::StatusCode::kInvalidArgument,
                  "gnmr_get_counters_sized: size " + std::to_string(size) + " < " +
                      std::to_string(kCountersBaseSize) + ": pass sizeof(gnmr_counters)");
    }
    const gnmr::ClientCounters k = c->client->Counters();
    out->reports_enqueued = k.reports_enqueued;
    out->reports_sent = k.reports_sent;
    out->reports_dropped = k.reports_dropped;
    out->acks_sent = k.acks_sent;
    out->acks_dropped = k.acks_dropped;
    out->decisions_received = k.decisions_received;
    out->decisions_rejected = k.decisions_rejected;
    out->missed_decisions = k.missed_decisions;
    out->registrations = k.registrations;
    out->reconnects = k.reconnects;
    out->connect_failures = k.connect_failures;
    out->connected = k.connected ? 1 : 0;
    out->last_decided_step = k.last_decided_step;
    out->stats_seconds = k.stats_seconds;
    out->stats_gpu_seconds = k.stats_gpu_seconds;
    out->overhead_source = static_cast<int32_t>(k.overhead_source);
    out->overhead_ratio = k.overhead_ratio;
    out->overhead_step = k.overhead_step;
    out->decisions_stale = k.decisions_stale;
    out->skipped_steps = k.skipped_steps;
    out->generation = k.generation;
    out->forward_calls_dropped = k.forward_calls_dropped;
    // Appended fields: only those the caller's struct has.
    auto fits = [size](size_t offset, size_t bytes) { return offset + bytes <= size; };
    if (fits(offsetof(gnmr_counters, attach_failures), sizeof(out->attach_failures))) {
      out->attach_failures = k.attach_failures;
    }
    if (fits(offsetof(gnmr_counters, steps_without_decision),
             sizeof(out->steps_without_decision))) {
      out->steps_without_decision = k.steps_without_decision;
    }
    return GNMR_OK;
  });
}

int gnmr_wait_connected(gnmr_client* c, int32_t timeout_ms) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    return Report(c->client->WaitConnected(std::chrono::milliseconds(timeout_ms)));
  });
}

int gnmr_export_state(gnmr_client* c, int32_t timeout_ms, void** state_out, size_t* len_out) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (state_out == nullptr) return Null("state_out");
    if (len_out == nullptr) return Null("len_out");
    *state_out = nullptr;
    *len_out = 0;
    gnmr::StatusOr<std::string> state =
        c->client->ExportState(std::chrono::milliseconds(timeout_ms));
    if (!state.ok()) return Report(state.status());
    // malloc(0) may return NULL: always ask for at least one byte.
    void* buffer = std::malloc(state->size() + 1);
    if (buffer == nullptr) return Fail(gnmr::StatusCode::kResourceExhausted, "out of memory");
    std::memcpy(buffer, state->data(), state->size());
    *state_out = buffer;
    *len_out = state->size();
    return GNMR_OK;
  });
}

int gnmr_import_state(gnmr_client* c, const void* state, size_t len, int32_t timeout_ms,
                      uint64_t* generation_out) {
  return Call([&]() -> int {
    if (c == nullptr) return Null("client");
    if (state == nullptr && len > 0) return Null("state");
    const std::string bytes =
        state == nullptr ? std::string() : std::string(static_cast<const char*>(state), len);
    gnmr::StatusOr<uint64_t> generation =
        c->client->ImportState(bytes, std::chrono::milliseconds(timeout_ms));
    if (!generation.ok()) return Report(generation.status());
    if (generation_out != nullptr) *generation_out = *generation;
    return GNMR_OK;
  });
}

void gnmr_free(void* buffer) { std::free(buffer); }

gnmr_plan* gnmr_plan_new(void) {
  try {
    return new gnmr_plan();
  } catch (...) {
    g_last_error = "out of memory";
    return nullptr;
  }
}

void gnmr_plan_free(gnmr_plan* plan) { delete plan; }

int gnmr_plan_info_get(const gnmr_plan* plan, gnmr_plan_info* out) {
  return Call([&]() -> int {
    if (plan == nullptr) return Null("plan");
    if (out == nullptr) return Null("out");
    const gnmr::Plan& p = plan->plan;
    out->step = p.step;
    out->has_decision = p.has_decision ? 1 : 0;
    out->global_skip = p.global_skip ? 1 : 0;
    out->observed_step = p.observed_step;
    out->apply_step = p.apply_step;
    out->sequence = p.sequence;
    out->digest = p.digest;
    out->num_entries = static_cast<uint32_t>(p.entries.size());
    out->miss_reason = static_cast<int32_t>(p.miss_reason);
    out->generation = p.generation;
    out->nonfinite_observed = p.nonfinite_observed ? 1 : 0;
    out->skip_step = p.skip_step ? 1 : 0;
    return GNMR_OK;
  });
}

int gnmr_plan_entry_get(const gnmr_plan* plan, uint32_t index, gnmr_plan_entry* out) {
  return Call([&]() -> int {
    if (plan == nullptr) return Null("plan");
    if (out == nullptr) return Null("out");
    if (index >= plan->plan.entries.size()) {
      return Fail(gnmr::StatusCode::kOutOfRange, "entry index out of range");
    }
    const gnmr::PlanEntry& e = plan->plan.entries[index];
    out->unit = e.unit;
    out->action = static_cast<int32_t>(e.action);
    out->entry = static_cast<int32_t>(e.entry);
    out->first_step = e.first_step ? 1 : 0;
    out->since = e.since;
    out->until = e.until;
    out->ref_norm = e.ref_norm;
    out->clip_min_scale = e.clip_min_scale;
    out->norm = e.norm;
    out->scale = e.scale;
    return GNMR_OK;
  });
}

}  // extern "C"
