// The avx512bf16 code path of activation_isa.h: [kernel.activation_avx512bf16] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA avx512bf16
#include "activation_isa.h"
