/* The GNMR client library, C API (docs/architecture.md, "The client library"),
 * for FFI (ctypes, cffi, Rust, Julia...). Installed as <gnmr/gnmr_c.h>.
 *
 * Conventions: functions return an int error code, GNMR_OK (0) on success,
 * else one of the GNMR_E* codes (the gRPC canonical codes); the message of
 * the calling thread's last error is gnmr_last_error(). Nothing blocks on
 * the network except gnmr_plan_for (bounded by decision_wait_ms) and
 * gnmr_flush (bounded by its timeout). Semantics are those of
 * gnmr::Client in <gnmr/client.h>.
 *
 *   gnmr_options o;
 *   gnmr_options_init(&o);
 *   o.target = "unix:/run/gnmr/gnmrd.sock"; o.job_id = "run3";
 *   o.rank = 0; o.world_size = 8;
 *   gnmr_client* c;
 *   if (gnmr_client_create(&o, &c) != GNMR_OK) puts(gnmr_last_error());
 *   gnmr_tensor t = {grad, numel, GNMR_DTYPE_FP32};  (host memory)
 *   gnmr_tensor d = {dgrad, numel, GNMR_DTYPE_BF16, GNMR_LOCATION_CUDA(0)};
 *   uint32_t unit;
 *   gnmr_add_unit(c, "layers.0.mlp.fc1", &t, 1, 0, 1, &unit);
 *   gnmr_start(c);
 *   gnmr_plan* plan = gnmr_plan_new();
 *   ... per step: gnmr_observe(c, step) (or gnmr_observe_on_stream(c, step,
 *       stream) with device tensors); gnmr_plan_for(c, step, plan);
 *       read gnmr_plan_info / gnmr_plan_entry; gnmr_ack(c, plan);
 *   gnmr_plan_free(plan);
 *   gnmr_client_destroy(c);
 *
 * ABI (0.2, unreleased): gnmr_plan_info gained miss_reason, generation,
 * nonfinite_observed and skip_step (the same-step guard: skip the
 * optimizer step when skip_step is 1, docs/safety.md), gnmr_counters gained
 * decisions_stale, skipped_steps, generation and forward_calls_dropped, and
 * decision_wait_ms
 * defaults to 2000; gnmr_wait_connected, gnmr_export_state,
 * gnmr_import_state and gnmr_free are new, gnmr_options gained
 * `admin_token`. gnmr_tensor gained `location`, `scale_inv` and `scale_inv_ptr`, gnmr_counters
 * gained the GPU/overhead fields, gnmr_options gained
 * `profile_gpu_overhead` (and later `pipeline_stage`). The new gnmr_tensor
 * fields read zero as the 0.1 meaning (host memory, scale_inv 1, no
 * pointer), so zero-initialised and brace-initialised structs keep working
 * after a recompile; but arrays of gnmr_tensor and gnmr_counters changed
 * size, so code built against the 0.1 header must be recompiled (FFI
 * bindings: add the fields). gnmr_options stays compatible: its
 * struct_size tells the library which fields exist. Since then
 * gnmr_counters only grows at its end, and only gnmr_get_counters_sized
 * (given the caller's size) writes the fields after forward_calls_dropped,
 * so binaries built against the earlier 0.2 header keep working.
 */
#ifndef GNMR_GNMR_C_H_
#define GNMR_GNMR_C_H_

#include <stddef.h>
#include <stdint.h>

#include "gnmr/export.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
  GNMR_OK = 0,
  GNMR_ECANCELLED = 1,
  GNMR_EUNKNOWN = 2,
  GNMR_EINVALID_ARGUMENT = 3,
  GNMR_EDEADLINE_EXCEEDED = 4,
  GNMR_ENOT_FOUND = 5,
  GNMR_EALREADY_EXISTS = 6,
  GNMR_EPERMISSION_DENIED = 7,
  GNMR_ERESOURCE_EXHAUSTED = 8,
  GNMR_EFAILED_PRECONDITION = 9,
  GNMR_EABORTED = 10,
  GNMR_EOUT_OF_RANGE = 11,
  GNMR_EUNIMPLEMENTED = 12,
  GNMR_EINTERNAL = 13,
  GNMR_EUNAVAILABLE = 14,
  GNMR_EDATA_LOSS = 15,
  GNMR_EUNAUTHENTICATED = 16
};

/* Element formats (values as gnmr.v1.DType). */
enum {
  GNMR_DTYPE_FP32 = 1,
  GNMR_DTYPE_BF16 = 2,
  GNMR_DTYPE_FP16 = 3,
  GNMR_DTYPE_FP8_E4M3FN = 4,
  GNMR_DTYPE_FP8_E5M2 = 5
};

/* Actions and entry treatments (values as gnmr.v1.Action / EntryTreatment). */
enum {
  GNMR_ACTION_PROMOTE = 0,
  GNMR_ACTION_CLIP = 1,
  GNMR_ACTION_SKIP = 2,
  GNMR_ACTION_RESET_STATE = 3
};
enum { GNMR_ENTRY_NONE = 0, GNMR_ENTRY_CLIP = 1, GNMR_ENTRY_SKIP = 2 };
/* Why a unit is in recovery (values as gnmr.v1.Trigger). */
enum {
  GNMR_TRIGGER_NONE = 0, /* unknown: a daemon that does not say */
  GNMR_TRIGGER_GNMR = 1,
  GNMR_TRIGGER_DELTA = 2,
  GNMR_TRIGGER_NONFINITE = 3,
  GNMR_TRIGGER_FORWARD = 4,
  GNMR_TRIGGER_SATURATION = 5,
  GNMR_TRIGGER_UNDERFLOW = 6,
  GNMR_TRIGGER_BLOCK_SATURATION = 7, /* the block rules (block-scaled forward tensors) */
  GNMR_TRIGGER_DEAD_BLOCKS = 8,
  GNMR_TRIGGER_SCALE_CLAMPS = 9,
  GNMR_TRIGGER_RELATIVE_ERROR = 10, /* relative error against the source */
  GNMR_TRIGGER_BACKWARD = 11,       /* the backward channel (the gradient as quantized) */
  GNMR_TRIGGER_BACKWARD_SATURATION = 12,
  GNMR_TRIGGER_BACKWARD_UNDERFLOW = 13
};

typedef struct gnmr_client gnmr_client;
typedef struct gnmr_plan gnmr_plan;

typedef struct gnmr_options {
  uint32_t struct_size; /* sizeof(gnmr_options); set by gnmr_options_init */
  const char* target;   /* "unix:/path", "host:port" or "local" */
  const char* job_id;
  uint32_t rank;
  uint32_t world_size;
  const char* token;           /* may be NULL */
  int32_t decision_wait_ms;    /* default 2000 (docs/safety.md) */
  uint32_t max_queued_reports; /* default 64 */
  int32_t backoff_initial_ms;  /* default 50 */
  int32_t backoff_max_ms;      /* default 1000 */
  /* 0.2: 1 = measure the GPU statistics kernels' share of all kernel time
   * with CUPTI (ClientOptions::profile_gpu_overhead); default 0. */
  int32_t profile_gpu_overhead;
  /* 0.2: sent by gnmr_export_state / gnmr_import_state only
   * (ClientOptions::admin_token); may be NULL. */
  const char* admin_token;
  /* later 0.2: target "local" only (ClientOptions::local_events_path): the job's
   * events appended as JSON Lines; may be NULL. Target "local" needs the
   * gnmr_client_local library (<gnmr/client_local.h>, docs/local_mode.md). */
  const char* local_events_path;
  /* later 0.2: this rank's pipeline stage, from 0, < world_size
   * (ClientOptions::pipeline_stage); default 0. */
  uint32_t pipeline_stage;
  /* later 0.2: how long the daemon may take to attach the Session stream
   * before the client registers again (ClientOptions::attach_timeout);
   * default 5000, must be > 0. */
  int32_t attach_timeout_ms;
} gnmr_options;

/* gnmr_tensor.location: where the memory is. */
#define GNMR_LOCATION_HOST 0
#define GNMR_LOCATION_CUDA(ordinal) ((int32_t)(ordinal) + 1)

typedef struct gnmr_tensor {
  const void* data; /* any alignment; memory as `location` says */
  uint64_t numel;
  int32_t dtype; /* GNMR_DTYPE_* */
  /* 0.2: GNMR_LOCATION_HOST (0) or GNMR_LOCATION_CUDA(k) = k + 1 (zero
   * means host, so 0.1-style initialisers keep their meaning). */
  int32_t location;
  /* 0.2, fp8 only: the real value is stored * scale_inv; 0 reads as 1. */
  float scale_inv;
  /* 0.2, fp8 only, optional (NULL: use scale_inv): where the current
   * scale_inv lives, read at every Observe instead (device tensors: memory
   * the CUDA device can read, e.g. the framework's scale_inv tensor, read
   * by the kernel on the stream; host tensors: host memory). See
   * gnmr::TensorRef::scale_inv_ptr. */
  const float* scale_inv_ptr;
} gnmr_tensor;

/* gnmr_plan_info.miss_reason (gnmr::MissReason). */
enum {
  GNMR_MISS_NONE = 0,
  GNMR_MISS_NO_DECISION_YET = 1,
  GNMR_MISS_TIMEOUT = 2,
  GNMR_MISS_DISCONNECTED = 3,
  GNMR_MISS_NOT_RECEIVED = 4
};

typedef struct gnmr_plan_info {
  int64_t step;
  int32_t has_decision;
  int32_t global_skip;
  int64_t observed_step;
  int64_t apply_step;
  uint64_t sequence;
  uint64_t digest;
  uint32_t num_entries;
  /* 0.2 */
  int32_t miss_reason; /* GNMR_MISS_* */
  uint64_t generation;
  int32_t nonfinite_observed; /* this rank saw NaN/Inf at `step` */
  int32_t skip_step;          /* 1: do not step the optimizer at `step` */
} gnmr_plan_info;

typedef struct gnmr_plan_entry {
  uint32_t unit;
  int32_t action;     /* GNMR_ACTION_* */
  int32_t entry;      /* GNMR_ENTRY_* */
  int32_t first_step; /* 1 if step == since */
  int64_t since;
  int64_t until;
  double ref_norm;
  double clip_min_scale;
  double norm;  /* NaN if unknown */
  double scale; /* clip factor */
} gnmr_plan_entry;

typedef struct gnmr_counters {
  uint64_t reports_enqueued;
  uint64_t reports_sent;
  uint64_t reports_dropped;
  uint64_t acks_sent;
  uint64_t acks_dropped;
  uint64_t decisions_received;
  uint64_t decisions_rejected;
  uint64_t missed_decisions;
  uint64_t registrations;
  uint64_t reconnects;
  uint64_t connect_failures;
  int32_t connected;
  int64_t last_decided_step;
  double stats_seconds; /* host time: statistics, GPU launch enqueue */
  /* 0.2 */
  double stats_gpu_seconds;       /* GPU time of the statistics launches */
  int32_t overhead_source;        /* GNMR_OVERHEAD_* */
  double overhead_ratio;          /* newest; ignore when UNAVAILABLE */
  int64_t overhead_step;          /* the step it measures, -1 if none */
  uint64_t decisions_stale;       /* of an older generation, ignored */
  uint64_t skipped_steps;         /* plans with skip_step */
  uint64_t generation;            /* the job generation followed */
  uint64_t forward_calls_dropped; /* device forward calls not taken */
  /* later 0.2: written by gnmr_get_counters_sized only. */
  uint64_t attach_failures;        /* streams the daemon did not attach in time */
  uint64_t steps_without_decision; /* planned steps in a row without decision */
} gnmr_counters;

/* gnmr_counters.overhead_source (values as gnmr.v1.OverheadSource). */
enum { GNMR_OVERHEAD_HOST_WALL = 1, GNMR_OVERHEAD_CUPTI = 2, GNMR_OVERHEAD_UNAVAILABLE = 3 };

/* The message of this thread's last failed call ("" if none). Valid until
 * the thread's next gnmr_* call. */
GNMR_EXPORT const char* gnmr_last_error(void);
/* The library's version, e.g. "0.2.0" (compare with GNMR_VERSION_STRING of
 * <gnmr/version.h> to detect a header/library mismatch). 0.2. */
GNMR_EXPORT const char* gnmr_version(void);

GNMR_EXPORT void gnmr_options_init(gnmr_options* options);

GNMR_EXPORT int gnmr_client_create(const gnmr_options* options, gnmr_client** out);
/* Stops the background thread and frees the client; NULL is a no-op. */
GNMR_EXPORT void gnmr_client_destroy(gnmr_client* client);

GNMR_EXPORT int gnmr_add_unit(gnmr_client* client, const char* name, const gnmr_tensor* tensors,
                              size_t count, uint32_t shard_index, uint32_t shard_count,
                              uint32_t* unit_out);
GNMR_EXPORT int gnmr_set_tensors(gnmr_client* client, uint32_t unit, const gnmr_tensor* tensors,
                                 size_t count);
GNMR_EXPORT int gnmr_start(gnmr_client* client);
GNMR_EXPORT int gnmr_observe(gnmr_client* client, int64_t step);
/* Observe with device units launched on `stream` (a cudaStream_t; NULL: the
 * legacy default stream). Returns without waiting for the GPU. */
GNMR_EXPORT int gnmr_observe_on_stream(gnmr_client* client, int64_t step, void* stream);
/* `unit` has nothing to report in the next observe (a MoE expert with no
 * tokens): left out of the report, inactive at that step
 * (gnmr::Client::MarkInactive; docs/statistics.md). */
GNMR_EXPORT int gnmr_mark_inactive(gnmr_client* client, uint32_t unit);
/* Overlap with backward: host unit `unit`'s statistics for the step in
 * progress, computed now (its gradient is final); the next observe uses
 * them, bit-identical to computing them there (gnmr::Client::ObserveUnit).
 * GNMR_EUNIMPLEMENTED for a device unit (observe launches those). */
GNMR_EXPORT int gnmr_observe_unit(gnmr_client* client, uint32_t unit);
/* later 0.2: forward-side statistics of `unit` for the forward channel
 * (gnmr::Client::ObserveForward): host tensors computed now, CUDA tensors
 * enqueued on the legacy default stream; sent with the next observe;
 * several calls before it add up. `saturation_magnitude`:
 * NULL (no saturation counting) or one value per tensor
 * (gnmr::TensorRef::saturation_magnitude; INFINITY: the format's largest
 * finite magnitude, for fp8 codes). */
GNMR_EXPORT int gnmr_observe_forward(gnmr_client* client, uint32_t unit, const gnmr_tensor* tensors,
                                     const float* saturation_magnitude, size_t count);
/* later 0.2: gnmr_observe_forward with CUDA tensors enqueued on `stream` (a
 * cudaStream_t; NULL: the legacy default stream), without waiting for the
 * GPU; the tensors need only stay valid in that stream's order. */
GNMR_EXPORT int gnmr_observe_forward_on_stream(gnmr_client* client, uint32_t unit,
                                               const gnmr_tensor* tensors,
                                               const float* saturation_magnitude, size_t count,
                                               void* stream);
/* later 0.2: block-scaled formats (gnmr::BlockFormat, gnmr/block_tensor.h). */
enum {
  GNMR_BLOCK_MXFP8_E4M3 = 1, /* e4m3fn codes, one E8M0 scale per 32 */
  GNMR_BLOCK_MXFP8_E5M2 = 2, /* e5m2 codes, one E8M0 scale per 32 */
  GNMR_BLOCK_MXFP4 = 3,      /* E2M1 codes, two per byte, one E8M0 scale per 32 */
  GNMR_BLOCK_NVFP4 = 4,      /* E2M1 codes, one e4m3fn scale per 16, global_scale */
  GNMR_BLOCK_FP8 = 5         /* e4m3fn codes, one fp32 scale per 1x128 or 128x128 */
};
/* Which elements share a scale (gnmr::BlockLayout). */
enum { GNMR_BLOCK_ROWWISE = 0, GNMR_BLOCK_COLUMNWISE = 1, GNMR_BLOCK_SQUARE = 2 };
/* How the scales are stored (gnmr::ScaleLayout). */
enum { GNMR_SCALES_COMPACT = 0, GNMR_SCALES_SWIZZLED = 1, GNMR_SCALES_COMPACT_TRANSPOSED = 2 };

/* later 0.2: one block-scaled tensor as the library stores it
 * (gnmr::BlockTensorRef: every field means what it means there). */
typedef struct gnmr_block_tensor {
  int32_t format;       /* GNMR_BLOCK_* */
  int32_t layout;       /* GNMR_BLOCK_ROWWISE, _COLUMNWISE, _SQUARE */
  int32_t scale_layout; /* GNMR_SCALES_* */
  int32_t location;     /* GNMR_LOCATION_HOST only, for now */
  const void* data;     /* codes [rows, cols], row-major */
  uint64_t rows;
  uint64_t cols;
  const void* scales; /* [scale_rows, scale_cols] as scale_layout says */
  uint64_t scale_rows;
  uint64_t scale_cols;
  float global_scale;   /* NVFP4's per-tensor scale; 0 reads as 1 */
  const void* source;   /* optional (NULL): the tensor before quantization */
  int32_t source_dtype; /* GNMR_DTYPE_FP32, _BF16 or _FP16 (0 reads as FP32) */
} gnmr_block_tensor;

/* later 0.2: gnmr_observe_forward for block-scaled tensors in host memory
 * (gnmr::Client::ObserveForwardBlocks): their statistics join the unit's
 * forward row, and their block figures its block columns. */
GNMR_EXPORT int gnmr_observe_forward_blocks(gnmr_client* client, uint32_t unit,
                                            const gnmr_block_tensor* tensors, size_t count);
/* later 0.2: the backward channel (gnmr::Client::ObserveBackward): the
 * gradient as the unit's backward quantizer stored it for its dgrad / wgrad
 * GEMMs, host tensors only (a CUDA one: GNMR_EUNIMPLEMENTED); sent with the
 * next observe; several calls before it add up. `saturation_magnitude` as
 * for gnmr_observe_forward. */
GNMR_EXPORT int gnmr_observe_backward(gnmr_client* client, uint32_t unit,
                                      const gnmr_tensor* tensors, const float* saturation_magnitude,
                                      size_t count);
/* later 0.2: the same for block-scaled tensors in host memory: their
 * dequantized statistics join the unit's backward row. */
GNMR_EXPORT int gnmr_observe_backward_blocks(gnmr_client* client, uint32_t unit,
                                             const gnmr_block_tensor* tensors, size_t count);
/* Fills `plan` (from gnmr_plan_new) with the actions in force at `step`. */
GNMR_EXPORT int gnmr_plan_for(gnmr_client* client, int64_t step, gnmr_plan* plan);
GNMR_EXPORT int gnmr_ack(gnmr_client* client, const gnmr_plan* plan);
/* 1 if every queued report was written within timeout_ms, else 0. */
GNMR_EXPORT int gnmr_flush(gnmr_client* client, int32_t timeout_ms);
/* Fills the fields up to forward_calls_dropped (the struct as the earlier
 * 0.2 header declared it); the fields after it are left as they are. */
GNMR_EXPORT int gnmr_get_counters(const gnmr_client* client, gnmr_counters* out);
/* Later 0.2: fills every field of `out` that lies within its first `size`
 * bytes; pass sizeof(gnmr_counters). GNMR_EINVALID_ARGUMENT if `size` is
 * smaller than the fields gnmr_get_counters fills. */
GNMR_EXPORT int gnmr_get_counters_sized(const gnmr_client* client, gnmr_counters* out, size_t size);
/* GNMR_OK once the daemon attached this rank (registered, and its Session
 * stream answered: gnmr_counters.connected); else, after its first
 * connection attempt failed or timeout_ms, the reason as an error code
 * (GNMR_EUNAUTHENTICATED, GNMR_EUNAVAILABLE naming the target's problem,
 * GNMR_EFAILED_PRECONDITION for a refused registration,
 * GNMR_EDEADLINE_EXCEEDED while still trying or for a stream the daemon
 * did not attach within attach_timeout_ms) and gnmr_last_error(). */
GNMR_EXPORT int gnmr_wait_connected(gnmr_client* client, int32_t timeout_ms);

/* 0.2, checkpoints (gnmr::Client::ExportState / ImportState,
 * docs/checkpoint.md): these block on the network for up to timeout_ms;
 * call them when a checkpoint is written or loaded, never per step.
 * gnmr_export_state stores the job's controller state in *state_out (a
 * buffer of *len_out bytes the caller frees with gnmr_free).
 * gnmr_import_state replaces it and stores in *generation_out (may be NULL)
 * the job generation the import started. */
GNMR_EXPORT int gnmr_export_state(gnmr_client* client, int32_t timeout_ms, void** state_out,
                                  size_t* len_out);
GNMR_EXPORT int gnmr_import_state(gnmr_client* client, const void* state, size_t len,
                                  int32_t timeout_ms, uint64_t* generation_out);
/* Frees a buffer this library returned; NULL is a no-op. */
GNMR_EXPORT void gnmr_free(void* buffer);

GNMR_EXPORT gnmr_plan* gnmr_plan_new(void);
GNMR_EXPORT void gnmr_plan_free(gnmr_plan* plan);
GNMR_EXPORT int gnmr_plan_info_get(const gnmr_plan* plan, gnmr_plan_info* out);
GNMR_EXPORT int gnmr_plan_entry_get(const gnmr_plan* plan, uint32_t index, gnmr_plan_entry* out);
/* Later 0.2: *out = 1 if entry `index` is a denied clip (denied: clip, lag
 * 0: a unit the budget left out, clipped on this step only; it reads as an
 * ordinary clip entry otherwise), else 0. A function of its own so that
 * gnmr_plan_entry keeps its size. */
GNMR_EXPORT int gnmr_plan_entry_denied_clip(const gnmr_plan* plan, uint32_t index, int32_t* out);

/* Why a plan entry's unit is in recovery: the trigger and figures of the
 * sample that admitted it (a denied clip: that denied it); docs/controller.md,
 * "Why a unit is in recovery". Informational: nothing here changes what a
 * rank applies. */
typedef struct gnmr_entry_reason {
  int32_t trigger;         /* GNMR_TRIGGER_* */
  double gnmr;             /* 0 when non-finite */
  double delta;            /* Delta-GNMR */
  double fwd_ratio;        /* F, vs tau_forward; 0 when not evaluated */
  double saturation_ratio; /* S, vs tau_saturation */
  double underflow_ratio;  /* U, vs underflow_fraction */
} gnmr_entry_reason;
GNMR_EXPORT int gnmr_plan_entry_reason(const gnmr_plan* plan, uint32_t index,
                                       gnmr_entry_reason* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GNMR_GNMR_C_H_ */
