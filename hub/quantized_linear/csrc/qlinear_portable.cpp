// The portable code path of qlinear_isa.h: [kernel.qlinear_portable] in build.toml compiles it with that
// instruction set's flags; torch_binding.cpp chooses a path at run time (kx_dispatch.h).
#define KX_ISA portable
#include "qlinear_isa.h"
