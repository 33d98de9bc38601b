// The function table each per-ISA unit exports; the registration unit picks one at run time.
#pragma once
#include <cstdint>

namespace kx {

enum UnaryOp : int { kSilu = 0, kGelu, kGeluTanh, kGeluNew, kGeluFast, kGeluQuick, kNumUnary };

using UnaryFn = void (*)(const void* x, void* y, int64_t n);
// silu_table: for the 16-bit dtypes, this code path's unary silu of every 16-bit input (the
// registration unit's lookup table, with one spare entry after the last); nullptr for float32.
using GatedFn = void (*)(const void* x, void* y, int64_t rows, int64_t d, int64_t in_stride,
                         int64_t out_stride, const uint16_t* silu_table);

// The backward of silu_and_mul: dx (rows x 2d, contiguous) from g (rows x d, row stride g_stride)
// and the forward's input x (rows x 2d, row stride x_stride).
using GatedBwdFn = void (*)(const void* g, int64_t g_stride, const void* x, int64_t x_stride, void* dx,
                            int64_t rows, int64_t d);

struct ActivationTable {
  UnaryFn unary[kNumUnary][3];  // [op][dtype: f32, bf16, f16]
  GatedFn silu_and_mul[3];
  GatedBwdFn silu_and_mul_backward[3];
};

}  // namespace kx
