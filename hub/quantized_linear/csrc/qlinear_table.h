// The function table each per-ISA unit exports; the registration unit picks one at run time.
#pragma once
#include <cstdint>

namespace kx {

// y[r * ldy + o] = sum_k x[r * K + k] * w[o, k] (+ bias[o]) for o in [o_begin, o_end) and the
// `rows` (1 to kGemvRows) rows of x, float32, w read straight from its packed blocks.
// `xsum` (Q4_1 only, else unused) holds, per row of x and per block b, the sum of x[32b .. 32b+31]:
// the block's min m multiplies it.
using GemvFn = void (*)(const uint8_t* w, const float* x, const float* xsum, int64_t rows, int64_t K,
                        const float* bias, float* y, int64_t ldy, int64_t o_begin, int64_t o_end);

// Rows [o_begin, o_end) of the packed weight dequantized to float32 rows of K at
// out[(o - o_begin) * K]: exactly ggml's values (d * q, or d * q + m, never fused).
using DequantFn = void (*)(const uint8_t* w, int64_t K, float* out, int64_t o_begin, int64_t o_end);

// The int8 GEMM (qlinear_int8.h). QuantActsFn: `rows` rows of K float32 activations -> per block
// of 32, int8 values (q, rows x K bytes), the scale (d), for Q4_1 the float sum (s) and, where q2
// is not null, the residual x - d q quantized in turn (q2, d2).
// GemmI8Fn: y[m * ldy + n] = the block-scaled integer dot products (+ bias[n]) for every m < M
// and n in [n_begin, n_end), w read from its packed blocks; q2/d2 (or null): the residual's
// quantized activations, whose products are added (a second pass).
// allow_vnni: false runs AVX2's vpmaddubsw where the path also has a VNNI variant (to test and
// measure it on a VNNI machine); one call passes the same value to both (the variants' activation
// layouts differ). Int8DotFn: the dot-product instruction the two run with that value.
using QuantActsFn = void (*)(const float* x, int64_t rows, int64_t K, uint8_t* q, float* d, float* s, uint8_t* q2,
                             float* d2, bool allow_vnni);
using GemmI8Fn = void (*)(const uint8_t* w, int64_t K, const uint8_t* q, const float* d, const float* s,
                          const uint8_t* q2, const float* d2, int64_t M, const float* bias, float* y, int64_t ldy,
                          int64_t n_begin, int64_t n_end, bool allow_vnni);
using Int8DotFn = const char* (*)(bool allow_vnni);

// The int8 GEMV (qlinear_gemv_i8.h), decode's path. GemvI8ActsFn: `rows` rows of K float32
// activations -> signed int8 q (rows x K), where q2 is not null the residual's q2 (a second pass),
// and 4 floats per row and block (d_x, d_r or 0, r, X / 8: see the header). GemvI8Fn: y as GemvFn's
// from those, for `rows` (1 to kGemvRows) rows; q2 null: one pass.
using GemvI8ActsFn = void (*)(const float* x, int64_t rows, int64_t K, bool two, int8_t* q, int8_t* q2,
                              float* scales);
using GemvI8Fn = void (*)(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t rows,
                          int64_t K, const float* bias, float* y, int64_t ldy, int64_t o_begin, int64_t o_end);
constexpr int64_t kGemvI8Scales = 4;  // floats per row and block that GemvI8ActsFn writes
// The int8 GEMV on a weight in the GEMV layout (qlinear_format.h, qlinear_gemv_x16.h): as
// GemvI8Fn from the same activations, for the output rows of groups [g_begin, g_end).
using GemvX16Fn = void (*)(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t rows,
                           int64_t K, const float* bias, float* y, int64_t ldy, int64_t g_begin, int64_t g_end);

constexpr int64_t kGemvRows = 4;  // rows of x one GEMV pass serves (the weights are read once per pass)

struct QLinearTable {
  GemvFn gemv[2];  // [QFormat]
  DequantFn dequant[2];
  QuantActsFn quant_acts[2];
  GemmI8Fn gemm_i8[2];
  Int8DotFn int8_dot;
  GemvI8ActsFn gemv_i8_acts;
  GemvI8Fn gemv_i8[2];
  GemvX16Fn gemv_x16[2];  // [QFormat]
};

}  // namespace kx
