// Sizes shared by the per-ISA kernels (kx_vec.h) and the registration units (kx_dispatch.h),
// so that a kernel and its registration-side helpers split and stream work at the same points.
#pragma once

#include <cstdint>

namespace kx {

// Below this many elements an op runs on the calling thread: waking the pool costs more.
constexpr int64_t kSerialBelow = 16384;
// Elementwise maps split where PyTorch's own elementwise ops do (at::internal::GRAIN_SIZE).
// Splitting earlier (from 4096 elements) won about 3 us on a quiet machine, but on a shared one
// waking the pool's thread waits for a busy core's scheduler slice: in the dashboard soak (one core
// kept busy) SiLU at 24576 elements read 0.001x in a tenth of its pairs, and a Run and a compare
// of it minutes apart disagreed (1.41x against 0.45x), while PyTorch, serial there, did not move.
constexpr int64_t kMapSerialBelow = 32768;
// Outputs at least this large are written with non-temporal stores: they will not stay in cache
// for the next op anyway, and bypassing it saves the read of every output line that a normal
// store does first, a third of the memory traffic of an elementwise op.
constexpr int64_t kStreamFromBytes = int64_t{8} << 20;

}  // namespace kx
