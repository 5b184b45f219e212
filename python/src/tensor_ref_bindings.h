// TensorRef for Python: how a caller names host (or device) memory for the
// client's statistics, and the dtype names it accepts. module.cc binds the
// Client calls that take them (set_tensors, observe_forward,
// observe_forward_tensor).
#pragma once

#include <cstdint>
#include <string>

#include <pybind11/pybind11.h>

#include "gnmr/tensor.h"

namespace gnmr::python {

// "fp32", "bf16", "fp16", "fp8_e4m3fn", "fp8_e5m2" (also torch's names);
// anything else raises ValueError naming what is supported.
DType ParseDType(const std::string& s);

// A TensorRef from Python's numbers; ValueError for a null pointer with
// elements or an unknown dtype.
TensorRef MakeRef(uint64_t data_ptr, uint64_t numel, const std::string& dtype, int32_t device,
                  float scale_inv, uint64_t scale_inv_ptr, float saturation_magnitude);

void BindTensorRef(pybind11::module_& m);

}  // namespace gnmr::python
