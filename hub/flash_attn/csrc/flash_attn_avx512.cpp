// The avx512 code path of flash_attn_isa.h: [kernel.flash_attn_avx512] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA avx512
#include "flash_attn_isa.h"
