#include "python/src/block_bindings.h"

#include <Python.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/stl.h>

#include "gnmr/block_tensor.h"
#include "kernels/block_stats.h"
#include "python/src/tensor_ref_bindings.h"

namespace py = pybind11;

namespace gnmr::python {
namespace {

// The names of each enum (BlockFormatName's for formats), for parsing and
// printing both ways.
template <typename E>
using Names = std::initializer_list<std::pair<const char*, E>>;
const Names<BlockFormat> kFormats = {{"mxfp8_e4m3", BlockFormat::kMxfp8E4M3},
                                     {"mxfp8_e5m2", BlockFormat::kMxfp8E5M2},
                                     {"mxfp4", BlockFormat::kMxfp4},
                                     {"nvfp4", BlockFormat::kNvfp4},
                                     {"fp8_block", BlockFormat::kFp8Block}};
const Names<BlockLayout> kLayouts = {{"rowwise", BlockLayout::kRowwise},
                                     {"columnwise", BlockLayout::kColumnwise},
                                     {"square", BlockLayout::kSquare}};
const Names<ScaleLayout> kScaleLayouts = {{"compact", ScaleLayout::kCompact},
                                          {"swizzled", ScaleLayout::kSwizzled},
                                          {"compact_transposed", ScaleLayout::kCompactTransposed}};

// ValueError naming the supported values for an unknown name.
template <typename E>
E Parse(const Names<E>& names, const std::string& s, const char* what) {
  std::string supported;
  for (const auto& [name, value] : names) {
    if (s == name) return value;
    supported += (supported.empty() ? "" : ", ") + std::string(name);
  }
  throw py::value_error("unknown " + std::string(what) + " '" + s + "' (supported: " + supported +
                        ")");
}

template <typename E>
const char* Name(const Names<E>& names, E value) {
  for (const auto& [name, v] : names) {
    if (v == value) return name;
  }
  return "unknown";
}

// NotImplementedError: pybind11 has no C++ exception that maps to it.
[[noreturn]] void RaiseCudaNotWired() {
  PyErr_SetString(PyExc_NotImplementedError,
                  "block statistics of CUDA tensors are not wired to Python yet: pass host "
                  "(CPU) tensors");
  throw py::error_already_set();
}

const void* Ptr(uint64_t p) { return reinterpret_cast<const void*>(static_cast<uintptr_t>(p)); }

// Every field is checked by CheckBlockTensor when the statistics run (a
// descriptor is only names and numbers until then); only what cannot be
// represented, an unknown name or a device, is refused here.
BlockTensorRef MakeBlockTensor(const std::string& format, const std::string& layout,
                               const std::string& scale_layout, uint64_t data_ptr, uint64_t rows,
                               uint64_t cols, uint64_t scales_ptr, uint64_t scale_rows,
                               uint64_t scale_cols, float global_scale, uint64_t source_ptr,
                               const std::string& source_dtype, int32_t device) {
  if (device != kHostDevice) RaiseCudaNotWired();
  BlockTensorRef t;
  t.format = Parse(kFormats, format, "block format");
  t.layout = Parse(kLayouts, layout, "block layout");
  t.scale_layout = Parse(kScaleLayouts, scale_layout, "scale layout");
  t.device = device;
  t.data = Ptr(data_ptr);
  t.rows = rows;
  t.cols = cols;
  t.scales = Ptr(scales_ptr);
  t.scale_rows = scale_rows;
  t.scale_cols = scale_cols;
  t.global_scale = global_scale;
  t.source = Ptr(source_ptr);
  t.source_dtype = ParseDType(source_dtype);
  return t;
}

py::dict StatsDict(const BlockStats& s) {
  py::dict d;
  d["numel"] = s.numel;
  d["sumsq"] = s.sumsq;
  d["amax"] = s.amax;
  d["nonfinite"] = s.nonfinite;
  d["zero_codes"] = s.zero_codes;
  d["saturated"] = s.saturated;
  d["blocks"] = s.blocks;
  d["saturated_blocks"] = s.saturated_blocks;
  d["dead_blocks"] = s.dead_blocks;
  d["scale_clamps"] = s.scale_clamps;
  d["scale_log2_min"] = s.scale_log2_min;
  d["scale_log2_max"] = s.scale_log2_max;
  d["scale_log2_sum"] = s.scale_log2_sum;
  d["scaled_blocks"] = s.scaled_blocks;
  d["has_source"] = s.has_source;
  d["underflow"] = s.underflow;
  d["error_sumsq"] = s.error_sumsq;
  d["source_sumsq"] = s.source_sumsq;
  return d;
}

py::dict BlockStatsOf(const std::vector<BlockTensorRef>& tensors) {
  for (const BlockTensorRef& t : tensors) {
    if (t.device != kHostDevice) RaiseCudaNotWired();
  }
  BlockStats out;
  Status s;
  {
    // A large tensor takes a while; the caller keeps the memory alive.
    py::gil_scoped_release release;
    s = cpu::ComputeBlockStats(tensors.data(), tensors.size(), &out);
  }
  if (!s.ok()) {
    // Every refusal of the CPU path is a property of the descriptor.
    throw py::value_error(s.message());
  }
  return StatsDict(out);
}

std::string Repr(const BlockTensorRef& t) {
  return std::string("BlockTensor(format=") + BlockFormatName(t.format) +
         ", layout=" + Name(kLayouts, t.layout) +
         ", scale_layout=" + Name(kScaleLayouts, t.scale_layout) +
         ", rows=" + std::to_string(t.rows) + ", cols=" + std::to_string(t.cols) +
         ", scale_rows=" + std::to_string(t.scale_rows) +
         ", scale_cols=" + std::to_string(t.scale_cols) +
         ", global_scale=" + std::to_string(t.global_scale) +
         ", source=" + (t.source != nullptr ? DTypeName(t.source_dtype) : "none") + ")";
}

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

}  // namespace

void BindBlockStats(py::module_& m) {
  py::class_<BlockTensorRef>(
      m, "BlockTensor",
      "A non-owning view of one block-scaled tensor in host memory (gnmr/block_tensor.h, "
      "BlockTensorRef): the caller keeps data, scales and source alive. gnmr.blocks.describe "
      "builds one from torch tensors.")
      .def(py::init(&MakeBlockTensor), py::kw_only(), py::arg("format"),
           py::arg("layout") = "rowwise", py::arg("scale_layout") = "compact", py::arg("data_ptr"),
           py::arg("rows"), py::arg("cols"), py::arg("scales_ptr"), py::arg("scale_rows"),
           py::arg("scale_cols"), py::arg("global_scale") = 1.0f,
           py::arg("source_ptr") = uint64_t{0}, py::arg("source_dtype") = "fp32",
           py::arg("device") = kHostDevice)
      .def_property_readonly("format",
                             [](const BlockTensorRef& t) { return BlockFormatName(t.format); })
      .def_property_readonly("layout",
                             [](const BlockTensorRef& t) { return Name(kLayouts, t.layout); })
      .def_property_readonly(
          "scale_layout",
          [](const BlockTensorRef& t) { return Name(kScaleLayouts, t.scale_layout); })
      .def_property_readonly("data_ptr", [](const BlockTensorRef& t) { return Addr(t.data); })
      .def_readonly("rows", &BlockTensorRef::rows)
      .def_readonly("cols", &BlockTensorRef::cols)
      .def_property_readonly("scales_ptr", [](const BlockTensorRef& t) { return Addr(t.scales); })
      .def_readonly("scale_rows", &BlockTensorRef::scale_rows)
      .def_readonly("scale_cols", &BlockTensorRef::scale_cols)
      .def_readonly("global_scale", &BlockTensorRef::global_scale)
      .def_property_readonly("source_ptr", [](const BlockTensorRef& t) { return Addr(t.source); })
      .def_property_readonly("source_dtype",
                             [](const BlockTensorRef& t) { return DTypeName(t.source_dtype); })
      .def("__repr__", &Repr);

  m.def("block_stats", &BlockStatsOf, py::arg("tensors"),
        "Statistics of one unit's block-scaled tensors (gnmr::cpu::ComputeBlockStats, "
        "docs/statistics.md \"Block-scaled formats\"): a dict of every BlockStats field. "
        "ValueError with the check's message for a descriptor the CPU path cannot read.");
}

}  // namespace gnmr::python
