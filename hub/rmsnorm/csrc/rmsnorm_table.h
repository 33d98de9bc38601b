// The function table each per-ISA unit exports; the registration unit picks one at run time.
#pragma once
#include <cstdint>

namespace kx {

// y[r, :] = w * to_input_dtype(x[r, :] * rsqrt(mean(x[r, :]^2) + eps)), computed in float32.
// Output dtype: the input's when weight and input share a dtype, float32 otherwise (eager's promotion).
using RmsNormFn = void (*)(const void* x, int64_t x_row_stride, const void* w, void* y, int64_t rows,
                           int64_t hidden, float eps);

// The backward of RmsNormFn over rows [begin, end): dx (contiguous, x's dtype) and, when dw is not
// null, dw[i] += sum over those rows of g * to_input_dtype(x * rstd), in float32. g has the
// forward output's dtype. The caller splits rows over threads and sums the per-thread dw.
using RmsNormBwdFn = void (*)(const void* g, int64_t g_row_stride, const void* x, int64_t x_row_stride,
                              const void* w, void* dx, float* dw, int64_t begin, int64_t end, int64_t hidden,
                              float eps);

struct RmsNormTable {
  RmsNormFn fn[3][3];  // [input dtype][weight dtype], codes f32, bf16, f16
  RmsNormBwdFn bwd[3][3];
};

}  // namespace kx
