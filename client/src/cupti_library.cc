// LoadCupti (see cupti_library.h for where it looks and why).
#include "client/src/cupti_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <utility>
#include <vector>

namespace gnmr {
namespace {

// CUPTI's soname follows the toolkit's major version (libcupti.so.13 for
// CUDA 13); a CUPTI of another major has other record layouts.
std::string SonameOfThisToolkit() {
  return "libcupti.so." + std::to_string(CUPTI_API_VERSION / 10000);
}

template <class Fn>
bool Find(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *fn != nullptr;
}

StatusOr<CuptiApi> LoadAll() {
  if (const char* stated = std::getenv("GNMR_CUPTI_LIBRARY"); stated != nullptr && *stated) {
    StatusOr<CuptiApi> api = LoadCuptiFrom(stated);
    if (!api.ok()) {
      return Status(api.status().code(), "GNMR_CUPTI_LIBRARY: " + api.status().message());
    }
    return api;
  }
  std::string tried;
  std::vector<std::string> places = {SonameOfThisToolkit()};
#ifdef GNMR_CUPTI_BUILD_PATH
  places.push_back(GNMR_CUPTI_BUILD_PATH);
#endif
  for (const std::string& place : places) {
    StatusOr<CuptiApi> api = LoadCuptiFrom(place);
    if (api.ok()) return api;
    tried += (tried.empty() ? "" : "; ") + api.status().message();
  }
  return Status(StatusCode::kUnavailable,
                "no CUPTI found (set GNMR_CUPTI_LIBRARY to a libcupti.so path): " + tried);
}

}  // namespace

StatusOr<CuptiApi> LoadCuptiFrom(const std::string& file) {
  // RTLD_LOCAL: CUPTI's symbols stay out of the global namespace, where
  // they could shadow those of a CUPTI the trainer's profiler loaded.
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return Status(StatusCode::kUnavailable, why != nullptr ? why : file + ": cannot be loaded");
  }
  CuptiApi api;
  std::string missing;
  Find(handle, "cuptiSubscribe", &api.subscribe, &missing);
  Find(handle, "cuptiUnsubscribe", &api.unsubscribe, &missing);
  Find(handle, "cuptiEnableCallback", &api.enable_callback, &missing);
  Find(handle, "cuptiActivityRegisterCallbacks", &api.register_callbacks, &missing);
  Find(handle, "cuptiActivityEnable", &api.enable, &missing);
  Find(handle, "cuptiActivityDisable", &api.disable, &missing);
  Find(handle, "cuptiActivityFlushAll", &api.flush_all, &missing);
  Find(handle, "cuptiActivityGetNextRecord", &api.get_next_record, &missing);
  Find(handle, "cuptiActivityGetNumDroppedRecords", &api.get_num_dropped_records, &missing);
  Find(handle, "cuptiGetResultString", &api.get_result_string, &missing);
  if (!missing.empty()) {
    // Not CUPTI (or a stripped one): nothing of it is used, so the handle
    // can go. A real CUPTI is never closed (see the header).
    dlclose(handle);
    return Status(StatusCode::kUnavailable, file + " lacks " + missing);
  }
  return api;
}

StatusOr<CuptiApi> LoadCupti() {
  static const StatusOr<CuptiApi>* loaded = new StatusOr<CuptiApi>(LoadAll());
  return *loaded;
}

}  // namespace gnmr
