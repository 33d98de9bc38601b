// The function table each per-ISA unit exports; the registration unit picks one at run time.
#pragma once
#include <cstdint>

namespace kx {

enum UnaryOp : int { kSilu = 0, kGelu, kGeluTanh, kGeluNew, kGeluFast, kGeluQuick, kNumUnary };

using UnaryFn = void (*)(const void* x, void* y, int64_t n);
using GatedFn = void (*)(const void* x, void* y, int64_t rows, int64_t d, int64_t in_stride,
                         int64_t out_stride);

struct ActivationTable {
  UnaryFn unary[kNumUnary][3];  // [op][dtype: f32, bf16, f16]
  GatedFn silu_and_mul[3];
};

}  // namespace kx
