#include "python/src/tensor_ref_bindings.h"

namespace py = pybind11;

namespace gnmr::python {

DType ParseDType(const std::string& s) {
  if (s == "fp32" || s == "float32" || s == "torch.float32") return DType::kFp32;
  if (s == "bf16" || s == "bfloat16" || s == "torch.bfloat16") return DType::kBf16;
  if (s == "fp16" || s == "float16" || s == "torch.float16") return DType::kFp16;
  if (s == "fp8_e4m3fn" || s == "float8_e4m3fn" || s == "torch.float8_e4m3fn") {
    return DType::kFp8E4M3;
  }
  if (s == "fp8_e5m2" || s == "float8_e5m2" || s == "torch.float8_e5m2") return DType::kFp8E5M2;
  throw py::value_error("unsupported dtype '" + s +
                        "' (supported: fp32, bf16, fp16, fp8_e4m3fn, fp8_e5m2)");
}

TensorRef MakeRef(uint64_t data_ptr, uint64_t numel, const std::string& dtype, int32_t device,
                  float scale_inv, uint64_t scale_inv_ptr, float saturation_magnitude) {
  if (data_ptr == 0 && numel > 0) throw py::value_error("tensor data_ptr is 0 but numel > 0");
  TensorRef t;
  t.data = reinterpret_cast<const void*>(static_cast<uintptr_t>(data_ptr));
  t.numel = numel;
  t.dtype = ParseDType(dtype);
  t.device = device;
  t.scale_inv = scale_inv;
  t.scale_inv_ptr = reinterpret_cast<const float*>(static_cast<uintptr_t>(scale_inv_ptr));
  t.saturation_magnitude = saturation_magnitude;  // checked by the statistics (tensor.h)
  return t;
}

void BindTensorRef(py::module_& m) {
  py::class_<TensorRef>(m, "TensorRef",
                        "A non-owning view of host memory: the caller keeps it alive.")
      .def(py::init(&MakeRef), py::arg("data_ptr"), py::arg("numel"), py::arg("dtype") = "fp32",
           py::arg("device") = -1, py::arg("scale_inv") = 1.0f, py::arg("scale_inv_ptr") = 0,
           py::arg("saturation_magnitude") = 0.0f)
      .def_property_readonly("data_ptr",
                             [](const TensorRef& t) { return reinterpret_cast<uintptr_t>(t.data); })
      .def_readonly("numel", &TensorRef::numel)
      .def_property_readonly("dtype", [](const TensorRef& t) { return DTypeName(t.dtype); })
      .def_readonly("device", &TensorRef::device)
      .def_readonly("scale_inv", &TensorRef::scale_inv)
      .def_readonly("saturation_magnitude", &TensorRef::saturation_magnitude)
      .def_property_readonly("scale_inv_ptr", [](const TensorRef& t) {
        return reinterpret_cast<uintptr_t>(t.scale_inv_ptr);
      });
}

}  // namespace gnmr::python
