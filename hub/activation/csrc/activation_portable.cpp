// The portable code path of activation_isa.h: [kernel.activation_portable] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA portable
#include "activation_isa.h"
