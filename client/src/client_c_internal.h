// What the C API's files share (client_c.cc, client_c_blocks.cc,
// client_c_backward.cc, client_c_plan_entry.cc): the client and plan
// handles, the tensor conversions, and the helpers that turn a Status into
// an int code plus a thread-local message (gnmr_last_error) and catch every
// exception.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "gnmr/block_tensor.h"
#include "gnmr/client.h"
#include "gnmr/gnmr_c.h"
#include "gnmr/status.h"

struct gnmr_client {
  std::unique_ptr<gnmr::Client> client;
  std::vector<gnmr::TensorRef> scratch;             // reused by set_tensors and observe_forward
  std::vector<gnmr::BlockTensorRef> block_scratch;  // reused by observe_forward_blocks
};

struct gnmr_plan {
  gnmr::Plan plan;
};

namespace gnmr::c_api {

// The newest failure's message on this thread ("" after a success).
extern thread_local std::string g_last_error;

// Records `message` and returns `code` as an int.
int Fail(StatusCode code, const std::string& message);
// GNMR_OK, or Fail with s's code and message.
int Report(const Status& s);
// InvalidArgument "<what> is NULL".
int Null(const char* what);

// The C++ views of C tensors: `out` resized to n, one TensorRef each.
void ToRefs(const gnmr_tensor* t, size_t n, std::vector<gnmr::TensorRef>* out);
// The descriptor of t, or "" and the message of the field out of range.
std::string ToBlockRef(const gnmr_block_tensor& t, BlockTensorRef* r);

// Runs `f` (returning an int code) with every exception turned into
// GNMR_EINTERNAL.
template <typename F>
int Call(F&& f) {
  try {
    g_last_error.clear();
    return f();
  } catch (const std::exception& e) {
    return Fail(StatusCode::kInternal, e.what());
  } catch (...) {
    return Fail(StatusCode::kInternal, "unknown exception");
  }
}

}  // namespace gnmr::c_api
