// The function table each per-ISA unit exports; the registration unit picks one at run time.
#pragma once
#include <cstdint>

namespace kx {

// Where each row (all dims but the last) of x, cos and sin starts: broadcast dims have stride 0.
struct RowIndex {
  static constexpr int kMaxDims = 8;
  int dims;
  int64_t sizes[kMaxDims];
  int64_t strides[3][kMaxDims];  // x, cos, sin
};

// y = x * cos + rotate_half(x) * sin, rows of length d (even), y contiguous.
using RotaryFn = void (*)(const void* x, const void* cos, const void* sin, void* y, int64_t rows, int64_t d,
                          const RowIndex& index);

struct RotaryTable {
  RotaryFn fn[3];  // f32, bf16, f16
};

}  // namespace kx
