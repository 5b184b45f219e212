// The x86 instruction sets the CPU statistics kernel is built for, picked at
// run time (kernels/cpu/item_kernels.h). Every build gives bit-identical
// results; tests and benchmarks name one to compare them.
#pragma once

namespace gnmr::cpu {

enum class Isa { kBaseline, kAvx2, kAvx512 };
const char* IsaName(Isa isa);
// Whether this build has the kernel and this CPU can run it.
bool IsaAvailable(Isa isa);
// The best available ISA (what ComputeStats uses).
Isa SelectedIsa();

}  // namespace gnmr::cpu
