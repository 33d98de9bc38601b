// The avx2 code path of qlinear_isa.h: [kernel.qlinear_avx2] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA avx2
#include "qlinear_isa.h"
