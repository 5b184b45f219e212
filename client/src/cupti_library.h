// CuptiApi: the CUPTI entry points the client calls, and LoadCupti, which
// finds them at run time with dlopen.
//
// Why at run time: CUPTI needs a driver and lives in the CUDA toolkit or in
// the trainer's own environment (pip's nvidia-cuda-cupti, a conda env),
// rarely on the loader path of a machine without a GPU. A library linked
// against libcupti.so would refuse to load there, and a wheel would have to
// carry it. So nothing links CUPTI: the overhead measurement
// (docs/architecture.md, "The client library") looks it up when it starts, and a
// process without CUPTI runs without that measurement instead of failing.
//
// Where LoadCupti looks, first hit wins:
//   1. $GNMR_CUPTI_LIBRARY, a path to libcupti.so.N: stated, so a miss is
//      an error that names it (no fallback hides a wrong setting);
//   2. libcupti.so.<the toolkit's major>: a CUPTI already loaded in the
//      process (torch's profiler loads its own) or one on the loader path;
//   3. the toolkit this library was built against (its lib folder).
// The handle is never closed: CUPTI calls back into this library for as
// long as the process runs. Internal; the toolkit's <cupti.h> names the
// types, so this header is only included where CUPTI was found at build.
#pragma once

#include <string>

#include <cupti.h>

#include "gnmr/status.h"

namespace gnmr {

// Null where not set; CuptiProfiler calls only what it was given.
struct CuptiApi {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*get_next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*get_num_dropped_records)(CUcontext, uint32_t, size_t*) = nullptr;
  CUptiResult (*get_result_string)(CUptiResult, const char**) = nullptr;
};

// The process's CUPTI, loaded once (later calls return the first answer).
// Unavailable with every place tried and dlerror's reason when none has
// all the entry points above.
StatusOr<CuptiApi> LoadCupti();

// One attempt at `file` (a path or a soname), for LoadCupti and its tests.
StatusOr<CuptiApi> LoadCuptiFrom(const std::string& file);

}  // namespace gnmr
