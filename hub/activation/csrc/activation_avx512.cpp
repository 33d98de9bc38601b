// The avx512 code path of activation_isa.h: [kernel.activation_avx512] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA avx512
#include "activation_isa.h"
