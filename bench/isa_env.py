"""Emulate an AVX2-only machine on an AVX-512 one for a fair benchmark: imported before torch.

`KERNEL_EXPLORER_ISA=avx2` forces the bundled kernels' AVX2 code. Eager PyTorch and torch.compile
must then run AVX2 code too, or the comparison flatters them:

- ATen chooses its kernels' ISA once, at import, from `ATEN_CPU_CAPABILITY`;
- some eager ops are not ATen's own: float32 F.gelu runs oneDNN's JIT eltwise kernel, which picks
  its ISA itself (AVX-512 here whatever ATen does) unless `ONEDNN_MAX_CPU_ISA` caps it;
- Inductor compiles its C++ with `-march=native` unless `TORCHINDUCTOR_CPP_MARCH` says otherwise,
  and on a Zen 4 or Sapphire Rapids host that gives its "AVX2" code AVX-512VL's instructions and 32
  vector registers, which no AVX2 machine has.

So with the kernels forced to avx2, all three are set here (unless the caller set them), and
`describe()` says in the bench's output which ISA each side ran.
"""

from __future__ import annotations

import os

_FORCED = os.environ.get("KERNEL_EXPLORER_ISA", "").lower()
if _FORCED == "avx2":
    os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
    os.environ.setdefault("TORCHINDUCTOR_CPP_MARCH", "x86-64-v3")
    os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")


def describe(kernel_isa: str) -> str:
    """One line: the ISA each side of the comparison ran, and what forced it."""
    import torch

    forced = f" (forced by KERNEL_EXPLORER_ISA={_FORCED})" if _FORCED else " (chosen by measurement)"
    march = os.environ.get("TORCHINDUCTOR_CPP_MARCH", "native")
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA", "its best")
    return (
        f"kernel ISA {kernel_isa}{forced}; eager ATen {torch.backends.cpu.get_cpu_capability()}, "
        f"oneDNN {onednn}; torch.compile -march={march}"
    )
