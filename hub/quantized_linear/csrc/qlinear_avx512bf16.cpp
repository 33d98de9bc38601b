// The avx512bf16 code path of qlinear_isa.h: [kernel.qlinear_avx512bf16] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA avx512bf16
#include "qlinear_isa.h"
