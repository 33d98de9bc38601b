"""What matching eager bit for bit costs the 16-bit kernels: the same loops without the roundings.

Eager PyTorch stores every intermediate tensor of RMSNorm and rotary in the input's dtype, so the
kernels round each intermediate to bfloat16 where eager does (`kx::rnd`), which is what makes them
equal to eager. AVX-512-BF16 rounds in one instruction; AVX2 has no bfloat16 instructions, so each
rounding is five integer operations per vector, and rotary rounds three times per output element.

This script compiles, for the chosen ISA path, the kernels' loops (`kx_vec.h`'s loads, stores and
streaming, torch's threads) twice: as the kernels run them, with eager's roundings, and without
them (what torch.compile computes: it keeps intermediates in float32). Timed interleaved with the
kernel's out= form and a tensor copy of the same bytes, the rows show what the memory allows, what
the arithmetic allows, and what the roundings take on top.

    KERNEL_EXPLORER_ISA=avx2 python bench/rounding_cost.py            # the AVX2 path, 2 threads
    python bench/rounding_cost.py --isa avx512bf16 --threads 1
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import isa_env  # noqa: F401  (first: the AVX2 emulation, set before torch is imported)
import torch
from kernel_ops import HEAD_DIM, HEADS, HIDDEN, copy_bandwidth, interleaved
from limits import bandwidth_cells, print_preamble
from threads import use_threads

_SOURCE = r"""
#include <torch/extension.h>
#include "kx_vec.h"

using kx::VecF;

template <typename T, bool Round>
inline VecF r(const VecF& v) {
  if constexpr (Round) return kx::rnd<T>(v);
  return v;
}

// apply_rotary_pos_emb on x (heads, tokens, d) with cos/sin (tokens, d), as hub/rotary does it.
template <typename T, bool Round>
void rotary_t(const at::Tensor& x_, const at::Tensor& c_, const at::Tensor& s_, at::Tensor& y_) {
  const T* x = static_cast<const T*>(x_.data_ptr());
  const T* c = static_cast<const T*>(c_.data_ptr());
  const T* s = static_cast<const T*>(s_.data_ptr());
  T* y = static_cast<T*>(y_.data_ptr());
  const int64_t tokens = c_.size(0), d = c_.size(1), h = d / 2, rows = x_.numel() / d;
  const bool stream = kx::can_stream_rows(y, rows, d, d);
  kx::for_each_row_range(rows, d, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T *xr = x + row * d, *cr = c + (row % tokens) * d, *sr = s + (row % tokens) * d;
      T* yr = y + row * d;
      for (int64_t i = 0; i + kx::kBlock <= h; i += kx::kBlock) {
        VecF x1a, x1b, x2a, x2b, c1a, c1b, c2a, c2b, s1a, s1b, s2a, s2b;
        kx::load2(xr + i, x1a, x1b), kx::load2(xr + h + i, x2a, x2b);
        kx::load2(cr + i, c1a, c1b), kx::load2(cr + h + i, c2a, c2b);
        kx::load2(sr + i, s1a, s1b), kx::load2(sr + h + i, s2a, s2b);
        VecF o1a = r<T, Round>(x1a * c1a) + r<T, Round>(x2a.neg() * s1a);
        VecF o1b = r<T, Round>(x1b * c1b) + r<T, Round>(x2b.neg() * s1b);
        VecF o2a = r<T, Round>(x2a * c2a) + r<T, Round>(x1a * s2a);
        VecF o2b = r<T, Round>(x2b * c2b) + r<T, Round>(x1b * s2b);
        if (stream) {
          kx::stream2(yr + i, o1a, o1b), kx::stream2(yr + h + i, o2a, o2b);
        } else {
          kx::store2(yr + i, o1a, o1b), kx::store2(yr + h + i, o2a, o2b);
        }
      }
    }
    if (stream) kx::stream_fence();
  });
}

// LlamaRMSNorm on rows of x with weight w (same dtype), as hub/rmsnorm does it.
template <typename T, bool Round>
void rmsnorm_t(const at::Tensor& x_, const at::Tensor& w_, at::Tensor& y_) {
  const T* x = static_cast<const T*>(x_.data_ptr());
  const T* w = static_cast<const T*>(w_.data_ptr());
  T* y = static_cast<T*>(y_.data_ptr());
  const int64_t hidden = w_.numel(), rows = x_.numel() / hidden;
  const bool stream = kx::can_stream_rows(y, rows, hidden, hidden);
  kx::for_each_row_range(rows, hidden, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const T* xr = x + row * hidden;
      T* yr = y + row * hidden;
      VecF a, b, wa, wb, acc0(0.f), acc1(0.f);
      for (int64_t i = 0; i + kx::kBlock <= hidden; i += kx::kBlock) {
        kx::load2(xr + i, a, b);
        acc0 = acc0 + a * a, acc1 = acc1 + b * b;
      }
      float sum = at::vec::vec_reduce_all<float>([](VecF& p, VecF& q) { return p + q; }, acc0 + acc1);
      const VecF scale(1.f / std::sqrt(sum / static_cast<float>(hidden) + 1e-6f));
      for (int64_t i = 0; i + kx::kBlock <= hidden; i += kx::kBlock) {
        kx::load2(xr + i, a, b), kx::load2(w + i, wa, wb);
        if (stream) {
          kx::stream2(yr + i, wa * r<T, Round>(a * scale), wb * r<T, Round>(b * scale));
        } else {
          kx::store2(yr + i, wa * r<T, Round>(a * scale), wb * r<T, Round>(b * scale));
        }
      }
    }
    if (stream) kx::stream_fence();
  });
}

void rotary(const at::Tensor& x, const at::Tensor& c, const at::Tensor& s, at::Tensor y, bool round) {
  if (x.scalar_type() == at::kFloat) return rotary_t<float, false>(x, c, s, y);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "float32 or bfloat16");
  return round ? rotary_t<c10::BFloat16, true>(x, c, s, y) : rotary_t<c10::BFloat16, false>(x, c, s, y);
}

void rmsnorm(const at::Tensor& x, const at::Tensor& w, at::Tensor y, bool round) {
  if (x.scalar_type() == at::kFloat) return rmsnorm_t<float, false>(x, w, y);
  TORCH_CHECK(x.scalar_type() == at::kBFloat16, "float32 or bfloat16");
  return round ? rmsnorm_t<c10::BFloat16, true>(x, w, y) : rmsnorm_t<c10::BFloat16, false>(x, w, y);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("rotary", &rotary);
  m.def("rmsnorm", &rmsnorm);
}
"""


def build_loops(isa: str):
    """The two loops, with and without eager's roundings, compiled with `isa`'s flags from build.toml."""
    from torch.utils.cpp_extension import load_inline

    from kernel_explorer.build.bundled import hub_sources
    from kernel_explorer.build.compile_steps import COMMON_FLAGS
    from kernel_explorer.build.repo_format import read_plan

    (section,) = [k for k in read_plan(hub_sources() / "rotary").kernels if k.name == f"rotary_{isa}"]
    cache = Path(os.environ.get("KERNEL_EXPLORER_CACHE", "/tmp/kernel-explorer-cache")) / f"rounding-{isa}"
    cache.mkdir(parents=True, exist_ok=True)
    return load_inline(
        name=f"kx_rounding_{isa}",
        cpp_sources=[_SOURCE],
        extra_cflags=[*COMMON_FLAGS, *section.cxx_flags, "-DKX_ISA=" + isa],
        extra_include_paths=[str(hub_sources() / "common" / "csrc")],
        extra_ldflags=["-fopenmp"],
        build_directory=str(cache),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_isa = os.environ.get("KERNEL_EXPLORER_ISA", "avx2")
    parser.add_argument("--isa", default=default_isa, choices=["avx512bf16", "avx512", "avx2", "portable"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    args = parser.parse_args()
    print(use_threads(args.threads))

    from kernels import get_local_kernel

    from kernel_explorer.build.builder import build_hub

    wanted = ("rotary", "rmsnorm")
    hub = {b.name: get_local_kernel(b.repo_path) for b in build_hub(progress=False) if b.name in wanted}
    for module in hub.values():
        module.set_isa(args.isa)
    loops = build_loops(args.isa)
    roof = copy_bandwidth()
    columns = f"{'op':<9}{'dtype':<10}{'tokens':>6}  {'what':<30}"
    print_preamble(f"ISA path {args.isa} (kernels and loops)", roof, columns)
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for tokens in args.tokens:
            x = torch.randn(HEADS, tokens, HEAD_DIM, generator=gen).to(dtype)
            cos = torch.randn(tokens, HEAD_DIM, generator=gen).to(dtype)
            sin = torch.randn(tokens, HEAD_DIM, generator=gen).to(dtype)
            y = torch.empty_like(x)
            h = torch.randn(tokens, HIDDEN, generator=gen).to(dtype)
            w = torch.randn(HIDDEN, generator=gen).to(dtype)
            hy = torch.empty_like(h)
            # the kernels' own entry points take (1, heads, tokens, d) and cos (1, tokens, d)
            rot, rms, lr = hub["rotary"].apply_rotary, hub["rmsnorm"].rms_norm, loops.rotary
            q4, c3, s3 = x.unsqueeze(0), cos.unsqueeze(0), sin.unsqueeze(0)
            outs = (torch.empty_like(q4), torch.empty_like(q4))
            cases = {
                "rotary": (
                    2 * x.numel() * x.element_size() + 2 * cos.numel() * cos.element_size(),
                    {
                        "torch copy_ (memory)": lambda x=x, y=y: y.copy_(x),
                        "loop, no roundings": lambda x=x, c=cos, s=sin, y=y, lr=lr: lr(x, c, s, y, False),
                        "loop, eager's roundings": lambda x=x, c=cos, s=sin, y=y, lr=lr: lr(x, c, s, y, True),
                        "kernel out= (q and k, per one)": lambda q4=q4, c3=c3, s3=s3, outs=outs, rot=rot: rot(
                            q4, q4, c3, s3, out=outs
                        ),
                    },
                ),
                "rmsnorm": (
                    2 * h.numel() * h.element_size() + w.numel() * w.element_size(),
                    {
                        "torch copy_ (memory)": lambda h=h, hy=hy: hy.copy_(h),
                        "loop, no roundings": lambda h=h, w=w, hy=hy: loops.rmsnorm(h, w, hy, False),
                        "loop, eager's roundings": lambda h=h, w=w, hy=hy: loops.rmsnorm(h, w, hy, True),
                        "kernel out=": lambda h=h, w=w, hy=hy, rms=rms: rms(h, w, 1e-6, out=hy),
                    },
                ),
            }
            for op, (nbytes, rows) in cases.items():
                with torch.inference_mode():
                    times = interleaved(list(rows.values()))
                for name, t in zip(rows, times, strict=True):
                    if name.startswith("kernel out= (q and k"):
                        t = [s / 2 for s in t]  # the kernel rotates q and k in one call: per tensor
                    line = f"{op:<9}{str(dtype)[6:]:<10}{tokens:>6}  {name:<30}"
                    print(line + bandwidth_cells(t, nbytes, roof), flush=True)


if __name__ == "__main__":
    main()
