// Sizes shared by the per-ISA kernels (kx_vec.h) and the registration units (kx_dispatch.h),
// so that a kernel and its registration-side helpers split and stream work at the same points.
#pragma once

#include <cstdint>

namespace kx {

// Below this many elements an op runs on the calling thread: waking the pool costs more.
constexpr int64_t kSerialBelow = 16384;
// Elementwise maps cost 5 to 20 cycles per vector, so they split earlier: a one-token LLM
// activation (11008 elements) takes about 4 us on one core, and torch's pool wakes in about 1.
constexpr int64_t kMapSerialBelow = 4096;
// Outputs at least this large are written with non-temporal stores: they will not stay in cache
// for the next op anyway, and bypassing it saves the read of every output line that a normal
// store does first, a third of the memory traffic of an elementwise op.
constexpr int64_t kStreamFromBytes = int64_t{8} << 20;

}  // namespace kx
