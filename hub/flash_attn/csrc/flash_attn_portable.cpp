// The portable code path of flash_attn_isa.h: [kernel.flash_attn_portable] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA portable
#include "flash_attn_isa.h"
