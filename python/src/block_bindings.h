// Block-scaled tensors for Python (gnmr/block_tensor.h, kernels/block_stats.h):
// _gnmr.BlockTensor, a descriptor built from names and addresses, and
// _gnmr.block_stats([BlockTensor...]) -> dict of every BlockStats field.
// gnmr/blocks.py builds the descriptors from torch tensors (torchao, TE).
#pragma once

#include <pybind11/pybind11.h>

namespace gnmr::python {

void BindBlockStats(pybind11::module_& m);

}  // namespace gnmr::python
