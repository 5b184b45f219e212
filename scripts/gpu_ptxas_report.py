#!/usr/bin/env python3
"""ptxas resources of the CUDA statistics kernels, per instantiation: compiles
kernels/cuda/stats_kernels.cu, reduce_kernels.cu, apply_kernel.cu and block_stats_kernels.cu
(block-scaled formats: kernels named Block*) with the flags of the CMake build
(RelWithDebInfo, sm_90) and -Xptxas -v, and prints registers, spills, stack,
shared memory and the resulting occupancy of a 256-thread block on sm_90
(65536 registers and 64 warps per SM, registers allocated per warp in units of
256). Needs nvcc only, no GPU (docs/perf.md, "GPU").

  scripts/gpu_ptxas_report.py [--nvcc /usr/local/cuda/bin/nvcc] [--arch 90]
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = ["-O2", "-g", "-DNDEBUG", "--std=c++17", "-fmad=false", "-ftz=false"]
BLOCK = {"ItemKernel": 256, "SegKernel": 256, "ApplyKernel": 256, "UnitKernel": 128,
         "BlockKernel": 256, "FinalKernel": 1}
DTYPES = {"1": "fp32", "2": "bf16", "3": "fp16", "4": "fp8_e4m3fn", "5": "fp8_e5m2"}
FORMATS = {"1": "mxfp8_e4m3", "2": "mxfp8_e5m2", "3": "mxfp4", "4": "nvfp4", "5": "fp8_block"}


def occupancy(regs, threads, smem):
    warps = -(-threads // 32)  # a 1-thread kernel still takes a warp
    per_warp = -(-regs * 32 // 256) * 256
    blocks = min(65536 // max(per_warp * warps, 1), 2048 // threads, 32)
    if smem:
        blocks = min(blocks, (228 * 1024) // (smem + 1024))
    return blocks, blocks * warps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nvcc", default="/usr/local/cuda/bin/nvcc")
    p.add_argument("--arch", default="90")
    a = p.parse_args()
    text = ""
    for src in ("stats_kernels.cu", "reduce_kernels.cu", "apply_kernel.cu",
                "block_stats_kernels.cu"):
        cmd = [a.nvcc, *FLAGS, f"--generate-code=arch=compute_{a.arch},code=[sm_{a.arch}]",
               "-Xptxas", "-v", "-I", ROOT, "-I", os.path.join(ROOT, "kernels/include"), "-c",
               os.path.join(ROOT, "kernels/cuda", src), "-o", os.devnull]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            sys.stderr.write(r.stdout + r.stderr)
            return 1
        text += r.stdout + r.stderr
    rows, name = [], None
    for line in text.splitlines():
        m = re.search(r"Compiling entry function '(\S+)'", line)
        if m:
            name = m.group(1)
            kernel = next((k for k in BLOCK if k in name), name)
            d = re.search(r"DTypeE(\d)", name)
            sat = ",sat" if re.search(r"DTypeE\dELb1E", name) else ""
            label = kernel + (f"<{DTYPES[d.group(1)]}{sat}>" if d else "")
            b = re.search(r"BlockFormatE(\d)E", name)
            seg = re.search(r"SegKernelILb([01])E", name)
            if "3blk" in name:  # gnmr::cuda::blk: the block-scaled kernels
                label = ("Block" + kernel if not kernel.startswith("Block") else kernel) + (
                    f"<{FORMATS[b.group(1)]}>" if b else "") + (
                    ("<blocks>" if seg.group(1) == "1" else "<items>") if seg else "")
            rows.append({"kernel": label,
                         "block": BLOCK.get(kernel, 256), "regs": 0, "spill": "0/0",
                         "stack": 0, "smem": 0})
            continue
        m = re.search(r"Function properties for (\S+)", line)
        if m:
            name = m.group(1)
            continue
        if not rows or name is None or "ItemKernel" not in name and not any(
                k in name for k in BLOCK):
            continue
        m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads",
                      line)
        if m and "Careful" not in name:
            rows[-1]["stack"] = int(m.group(1))
            rows[-1]["spill"] = f"{m.group(2)}/{m.group(3)}"
        m = re.search(r"Used (\d+) registers", line)
        if m:
            rows[-1]["regs"] = int(m.group(1))
            s = re.search(r"(\d+) bytes smem", line)
            rows[-1]["smem"] = int(s.group(1)) if s else 0
    print(f"{'kernel':<36} {'block':>5} {'regs':>5} {'spill st/ld':>11} {'stack':>6} "
          f"{'smem':>6} {'blocks/SM':>9} {'warps/SM':>8}")
    for row in sorted(rows, key=lambda x: x["kernel"]):
        blocks, warps = occupancy(row["regs"], row["block"], row["smem"])
        print(f"{row['kernel']:<36} {row['block']:>5} {row['regs']:>5} {row['spill']:>11} "
              f"{row['stack']:>6} {row['smem']:>6} {blocks:>9} {warps:>5}/64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
