// The function table each per-ISA unit exports; the registration unit picks one at run time.
#pragma once
#include <cstdint>

namespace kx {

// y[r, :] = w * to_input_dtype(x[r, :] * rsqrt(mean(x[r, :]^2) + eps)), computed in float32.
// Output dtype: the input's when weight and input share a dtype, float32 otherwise (eager's promotion).
using RmsNormFn = void (*)(const void* x, int64_t x_row_stride, const void* w, void* y, int64_t rows,
                           int64_t hidden, float eps);

struct RmsNormTable {
  RmsNormFn fn[3][3];  // [input dtype][weight dtype], codes f32, bf16, f16
};

}  // namespace kx
