"""The memory limit under the bundled elementwise kernels: the same loop with no arithmetic.

`kx::map1` (the loop every unary activation runs: vector loads, the 16-bit widening and
narrowing, non-temporal stores from 8 MiB, torch's threads) is compiled here with an identity
function for the chosen ISA path, and timed interleaved with the kernel's out= form and a plain
tensor copy on the same bytes. What the kernel reaches against the identity loop is what its
arithmetic costs; what the identity loop reaches against the copy is the loop's own ceiling.

    python bench/limits.py                       # AVX2 path, float32 and bfloat16, 512 and 2048 tokens
    python bench/limits.py --gated               # and silu_and_mul against its own loop
    python bench/limits.py --isa avx512 --tokens 2048
"""

from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import isa_env  # noqa: F401  (first: the AVX2 emulation, set before torch is imported)
import torch
from kernel_ops import INTERMEDIATE, copy_bandwidth, interleaved
from threads import use_threads

_SOURCE = r"""
#include <torch/extension.h>
#include "kx_vec.h"

template <typename T>
void identity_t(const at::Tensor& x, at::Tensor& y) {
  kx::map1(static_cast<const T*>(x.data_ptr()), static_cast<T*>(y.data_ptr()), x.numel(),
           [](const kx::VecF& v) { return v; });
}

void identity(const at::Tensor& x, at::Tensor y) {
  if (x.scalar_type() == at::kFloat) return identity_t<float>(x, y);
  if (x.scalar_type() == at::kBFloat16) return identity_t<c10::BFloat16>(x, y);
  TORCH_CHECK(false, "float32 or bfloat16");
}

// The loop silu_and_mul runs (kx::map2_rows over the gate and up halves of each row), with one
// add in place of the op: both halves must be read, or the compiler would skip one.
template <typename T>
void gated_t(const at::Tensor& x, at::Tensor& y) {
  const int64_t d = y.size(-1), rows = y.numel() / d;
  const T* in = static_cast<const T*>(x.data_ptr());
  kx::map2_rows(in, in + d, 2 * d, static_cast<T*>(y.data_ptr()), d, rows, d,
                [](const kx::VecF& a, const kx::VecF& b) { return a + b; });
}

void gated(const at::Tensor& x, at::Tensor y) {
  if (x.scalar_type() == at::kFloat) return gated_t<float>(x, y);
  if (x.scalar_type() == at::kBFloat16) return gated_t<c10::BFloat16>(x, y);
  TORCH_CHECK(false, "float32 or bfloat16");
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("identity", &identity);
  m.def("gated", &gated);
}
"""


def build_identity(isa: str):
    """kx::map1 with an identity function, compiled with the kernels' flags for `isa`."""
    from torch.utils.cpp_extension import load_inline

    from kernel_explorer.build.bundled import hub_sources
    from kernel_explorer.build.compile_steps import COMMON_FLAGS
    from kernel_explorer.build.repo_format import read_plan

    activation = hub_sources() / "activation"
    common = hub_sources() / "common" / "csrc"
    # the flags the activation repository's build.toml gives this ISA's section: the same code path
    (section,) = [k for k in read_plan(activation).kernels if k.name == f"activation_{isa}"]
    cache = Path(os.environ.get("KERNEL_EXPLORER_CACHE", "/tmp/kernel-explorer-cache")) / f"limits-{isa}"
    cache.mkdir(parents=True, exist_ok=True)
    flags = [*COMMON_FLAGS, *section.cxx_flags, "-DKX_ISA=" + isa]  # copies: load mutates
    return load_inline(
        name=f"kx_limits_{isa}",
        cpp_sources=[_SOURCE],
        extra_cflags=flags,
        extra_include_paths=[str(common)],
        extra_ldflags=["-fopenmp"],
        build_directory=str(cache),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="avx2", choices=["avx512bf16", "avx512", "avx2", "portable"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--ops", nargs="+", default=["silu", "gelu_new", "gelu_fast"])
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    parser.add_argument(
        "--gated", action="store_true", help="also silu_and_mul against its loop (kx::map2_rows) with an add"
    )
    args = parser.parse_args()
    print(use_threads(args.threads))

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    act = next(get_local_kernel(b.repo_path) for b in build_hub(progress=False) if b.name == "activation")
    act.set_isa(args.isa)
    ident = build_identity(args.isa)
    roof = copy_bandwidth()
    columns = f"{'dtype':<10}{'tokens':>6}  {'what':<22}"
    print_preamble(f"ISA path {act.isa()} (kernel and loop)", roof, columns)
    for dtype in (torch.float32, torch.bfloat16):
        for tokens in args.tokens:
            x = (torch.randn(tokens, INTERMEDIATE, generator=torch.Generator().manual_seed(0)) * 3).to(dtype)
            out = torch.empty_like(x)
            nbytes = 2 * x.numel() * x.element_size()
            rows = {
                "torch copy_": lambda x=x, out=out: out.copy_(x),
                "map1 identity (limit)": lambda x=x, out=out: ident.identity(x, out),
            }
            for op in args.ops:
                rows[f"{op} out="] = lambda op=op, x=x, out=out: getattr(act, op)(x, out=out)
            with torch.inference_mode():
                times = interleaved(list(rows.values()))
            for name, t in zip(rows, times, strict=True):
                line = f"{str(dtype)[6:]:<10}{tokens:>6}  {name:<22}"
                print(line + bandwidth_cells(t, nbytes, roof), flush=True)
            if args.gated:  # silu_and_mul: gate and up halves in, one half out
                gate_up = torch.cat([x, x], dim=-1)
                nbytes = 3 * x.numel() * x.element_size()
                rows = {
                    "map2 gated add (limit)": lambda g=gate_up, out=out: ident.gated(g, out),
                    "silu_and_mul out=": lambda g=gate_up, out=out: act.silu_and_mul(g, out=out),
                }
                with torch.inference_mode():
                    times = interleaved(list(rows.values()))
                for name, t in zip(rows, times, strict=True):
                    line = f"{str(dtype)[6:]:<10}{tokens:>6}  {name:<22}"
                    print(line + bandwidth_cells(t, nbytes, roof), flush=True)


def print_preamble(isa_line: str, roof: float, first_columns: str) -> None:
    """The versions, threads and ISA, the copy roof, and a table header ending in the bandwidth cells."""
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {isa_line}")
    print(f"copy bandwidth (256 MiB, read+write): {roof:.1f} GB/s")
    print("GB/s counts the bytes read and written once; medians over interleaved rounds, [p25, p75]\n")
    header = f"{first_columns}{'us':>9}{'GB/s':>7}{'% copy':>7}  {'[p25, p75] % copy':>18}"
    print(header)
    print("-" * len(header))


def bandwidth_cells(seconds: list[float], nbytes: int, roof: float) -> str:
    """`us  GB/s  % copy  [p25, p75] % copy` of one row's interleaved times."""
    q = statistics.quantiles(seconds, n=4)
    med = statistics.median(seconds)
    pct = [100 * nbytes / s / 1e9 / roof for s in (med, q[2], q[0])]
    return f"{med * 1e6:>9.1f}{nbytes / med / 1e9:>7.1f}{pct[0]:>6.0f}%  [{pct[1]:>5.0f}%, {pct[2]:>5.0f}%]"


if __name__ == "__main__":
    main()
