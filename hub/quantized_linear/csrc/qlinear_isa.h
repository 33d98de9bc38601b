// Weight-only quantized linear kernels, one unit per instruction set (see kx_vec.h): a GEMV that
// streams the packed Q8_0 / Q4_1 blocks once for up to kGemvRows rows of activations (decode),
// the int8 GEMM for many rows (prefill, qlinear_int8.h), and the dequantization of weight rows to
// float32 that the dequantize-and-matmul GEMM path and the tests use.
//
// Each block's dot product is taken on the small integers q first and scaled once:
//   Q8_0:  sum_j x_j (d q_j)      = d * sum_j q_j x_j
//   Q4_1:  sum_j x_j (d q_j + m)  = d * sum_j q_j x_j + m * sum_j x_j
// (m's share in scalar registers, from the block sums of x computed once per call), so the
// weights are never materialised; the sums differ from a float32 matmul over the
// dequantized weights in rounding order only.
#include "kx_vec.h"
#include "qlinear_format.h"
#include "qlinear_table.h"

#include <c10/util/Half.h>

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace KX_ISA_NS {
using kx::kQ4_1Bytes;
using kx::kQ8_0Bytes;
using kx::kQBlock;

inline uint16_t half_bits(const uint8_t* p) {
  uint16_t bits;
  std::memcpy(&bits, p, 2);
  return bits;
}

// float16 -> float32 for every bit pattern: a scale becomes one load (a broadcast from memory
// for vectors), where converting in registers took a broadcast and a conversion on the shuffle
// ports, which bounded the GEMV (5 cycles per Q4_1 block with d and m converted that way). The
// values a weight's scales take are few, so the entries in use stay in L1/L2.
inline const float* half_table() {
  static const float* const table = [] {  // once per process, never freed; not std::vector: see kx::Scratch
    float* t = new float[65536];
    for (uint32_t i = 0; i < 65536; ++i) t[i] = static_cast<float>(c10::Half(uint16_t(i), c10::Half::from_bits()));
    return t;
  }();
  return table;
}

inline float half_at(const float* H, const uint8_t* p) { return H[half_bits(p)]; }

// Decode reads each weight row once, from L3 or memory (a token streams every layer's weights):
// the GEMVs fetch the row kPrefetchRows ahead of the one they compute, within their range (2, 4
// and 8 rows ahead measured alike).
constexpr int64_t kPrefetchRows = 4;
inline void prefetch_row_ahead(const uint8_t* w, int64_t row_bytes, int64_t o, int64_t o1) {
  if (o + kPrefetchRows >= o1) return;
  const uint8_t* p = w + (o + kPrefetchRows) * row_bytes;
  for (int64_t i = 0; i < row_bytes; i += 64) __builtin_prefetch(p + i, 0, 3);
}

#if defined(CPU_CAPABILITY_AVX512)
inline __m512 bcast_half(const float* H, const uint8_t* p) { return _mm512_set1_ps(H[half_bits(p)]); }
inline void q8_0_block(const uint8_t* p, __m512& q0, __m512& q1) {
  q0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2))));
  q1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18))));
}
inline void q4_1_block(const uint8_t* p, __m512& lo, __m512& hi) {
  __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4)));
  lo = _mm512_cvtepi32_ps(_mm512_and_si512(bytes, _mm512_set1_epi32(0x0f)));
  hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(bytes, 4));
}

// R rows of x against output rows [o0, o1). Two sets of accumulators (even and odd blocks) keep
// two dependency chains in flight.
template <int R>
void gemv_q8_0(const uint8_t* w, const float* x, const float*, int64_t K, const float* bias, float* y,
               int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * kQ8_0Bytes;
    prefetch_row_ahead(w, nb * kQ8_0Bytes, o, o1);
    __m512 acc_a[R], acc_b[R];
    for (int r = 0; r < R; ++r) acc_a[r] = acc_b[r] = _mm512_setzero_ps();
    auto step = [&](int64_t b, __m512 (&acc)[R]) {
      const uint8_t* p = row + b * kQ8_0Bytes;
      __m512 q0, q1;
      q8_0_block(p, q0, q1);
      const __m512 d = bcast_half(H, p);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * K + b * kQBlock;
        __m512 t = _mm512_mul_ps(q0, _mm512_loadu_ps(xr));
        t = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xr + 16), t);
        acc[r] = _mm512_fmadd_ps(t, d, acc[r]);
      }
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      step(b, acc_a);
      step(b + 1, acc_b);
    }
    if (b < nb) step(b, acc_a);
    for (int r = 0; r < R; ++r) {
      float s = _mm512_reduce_add_ps(_mm512_add_ps(acc_a[r], acc_b[r]));
      y[r * ldy + o] = bias ? s + bias[o] : s;
    }
  }
}

template <int R>
void gemv_q4_1(const uint8_t* w, const float* x, const float* xsum, int64_t K, const float* bias, float* y,
               int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * kQ4_1Bytes;
    prefetch_row_ahead(w, nb * kQ4_1Bytes, o, o1);
    __m512 acc_a[R], acc_b[R];
    float sm_a[R], sm_b[R];  // the min's share, m * (the block's sum of x), in scalar registers
    for (int r = 0; r < R; ++r) acc_a[r] = acc_b[r] = _mm512_setzero_ps(), sm_a[r] = sm_b[r] = 0.f;
    auto step = [&](int64_t b, __m512 (&acc)[R], float (&sm)[R]) {
      const uint8_t* p = row + b * kQ4_1Bytes;
      __m512 lo, hi;
      q4_1_block(p, lo, hi);
      const __m512 d = bcast_half(H, p);
      const float m = half_at(H, p + 2);
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * K + b * kQBlock;
        __m512 t = _mm512_mul_ps(lo, _mm512_loadu_ps(xr));
        t = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), t);
        acc[r] = _mm512_fmadd_ps(t, d, acc[r]);
        sm[r] += m * xsum[r * nb + b];
      }
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      step(b, acc_a, sm_a);
      step(b + 1, acc_b, sm_b);
    }
    if (b < nb) step(b, acc_a, sm_a);
    for (int r = 0; r < R; ++r) {
      float s = _mm512_reduce_add_ps(_mm512_add_ps(acc_a[r], acc_b[r])) + (sm_a[r] + sm_b[r]);
      y[r * ldy + o] = bias ? s + bias[o] : s;
    }
  }
}

void dequant_q8_0(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* p = w + o * nb * kQ8_0Bytes;
    float* dst = out + (o - o0) * K;
    for (int64_t b = 0; b < nb; ++b, p += kQ8_0Bytes, dst += kQBlock) {
      __m512 q0, q1;
      q8_0_block(p, q0, q1);
      const __m512 d = bcast_half(H, p);
      _mm512_storeu_ps(dst, _mm512_mul_ps(q0, d));
      _mm512_storeu_ps(dst + 16, _mm512_mul_ps(q1, d));
    }
  }
}

void dequant_q4_1(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* p = w + o * nb * kQ4_1Bytes;
    float* dst = out + (o - o0) * K;
    for (int64_t b = 0; b < nb; ++b, p += kQ4_1Bytes, dst += kQBlock) {
      __m512 lo, hi;
      q4_1_block(p, lo, hi);
      const __m512 d = bcast_half(H, p), m = bcast_half(H, p + 2);
      _mm512_storeu_ps(dst, _mm512_add_ps(_mm512_mul_ps(lo, d), m));  // product, then sum: ggml's rounding
      _mm512_storeu_ps(dst + 16, _mm512_add_ps(_mm512_mul_ps(hi, d), m));
    }
  }
}

#elif defined(CPU_CAPABILITY_AVX2)
inline __m256 bcast_half(const float* H, const uint8_t* p) { return _mm256_set1_ps(H[half_bits(p)]); }
inline __m256 widen8(__m128i bytes8, bool is_signed) {
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(bytes8) : _mm256_cvtepu8_epi32(bytes8));
}
// The block's 32 q as four vectors of 8 (elements 0-7, 8-15, 16-23, 24-31).
inline void q8_0_block(const uint8_t* p, __m256 (&q)[4]) {
  __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
  __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18));
  q[0] = widen8(a, true);
  q[1] = widen8(_mm_srli_si128(a, 8), true);
  q[2] = widen8(b, true);
  q[3] = widen8(_mm_srli_si128(b, 8), true);
}
inline void q4_1_block(const uint8_t* p, __m256 (&q)[4]) {
  const __m128i nibble = _mm_set1_epi8(0x0f);
  __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4));
  __m128i lo = _mm_and_si128(bytes, nibble);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
  q[0] = widen8(lo, false);
  q[1] = widen8(_mm_srli_si128(lo, 8), false);
  q[2] = widen8(hi, false);
  q[3] = widen8(_mm_srli_si128(hi, 8), false);
}
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline __m256 dot_block(const __m256 (&q)[4], const float* xr) {
  __m256 t = _mm256_mul_ps(q[0], _mm256_loadu_ps(xr));
  t = _mm256_fmadd_ps(q[1], _mm256_loadu_ps(xr + 8), t);
  t = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(xr + 16), t);
  return _mm256_fmadd_ps(q[3], _mm256_loadu_ps(xr + 24), t);
}

template <int R>
void gemv_q8_0(const uint8_t* w, const float* x, const float*, int64_t K, const float* bias, float* y,
               int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * kQ8_0Bytes;
    prefetch_row_ahead(w, nb * kQ8_0Bytes, o, o1);
    __m256 acc_a[R], acc_b[R];
    for (int r = 0; r < R; ++r) acc_a[r] = acc_b[r] = _mm256_setzero_ps();
    auto step = [&](int64_t b, __m256 (&acc)[R]) {
      const uint8_t* p = row + b * kQ8_0Bytes;
      __m256 q[4];
      q8_0_block(p, q);
      const __m256 d = bcast_half(H, p);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(dot_block(q, x + r * K + b * kQBlock), d, acc[r]);
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      step(b, acc_a);
      step(b + 1, acc_b);
    }
    if (b < nb) step(b, acc_a);
    for (int r = 0; r < R; ++r) {
      float s = hsum(_mm256_add_ps(acc_a[r], acc_b[r]));
      y[r * ldy + o] = bias ? s + bias[o] : s;
    }
  }
}

template <int R>
void gemv_q4_1(const uint8_t* w, const float* x, const float* xsum, int64_t K, const float* bias, float* y,
               int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * kQ4_1Bytes;
    prefetch_row_ahead(w, nb * kQ4_1Bytes, o, o1);
    __m256 acc_a[R], acc_b[R];
    float sm_a[R], sm_b[R];  // the min's share, m * (the block's sum of x), in scalar registers
    for (int r = 0; r < R; ++r) acc_a[r] = acc_b[r] = _mm256_setzero_ps(), sm_a[r] = sm_b[r] = 0.f;
    auto step = [&](int64_t b, __m256 (&acc)[R], float (&sm)[R]) {
      const uint8_t* p = row + b * kQ4_1Bytes;
      __m256 q[4];
      q4_1_block(p, q);
      const __m256 d = bcast_half(H, p);
      const float m = half_at(H, p + 2);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm256_fmadd_ps(dot_block(q, x + r * K + b * kQBlock), d, acc[r]);
        sm[r] += m * xsum[r * nb + b];
      }
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      step(b, acc_a, sm_a);
      step(b + 1, acc_b, sm_b);
    }
    if (b < nb) step(b, acc_a, sm_a);
    for (int r = 0; r < R; ++r) {
      float s = hsum(_mm256_add_ps(acc_a[r], acc_b[r])) + (sm_a[r] + sm_b[r]);
      y[r * ldy + o] = bias ? s + bias[o] : s;
    }
  }
}

void dequant_q8_0(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* p = w + o * nb * kQ8_0Bytes;
    float* dst = out + (o - o0) * K;
    for (int64_t b = 0; b < nb; ++b, p += kQ8_0Bytes, dst += kQBlock) {
      __m256 q[4];
      q8_0_block(p, q);
      const __m256 d = bcast_half(H, p);
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(dst + 8 * i, _mm256_mul_ps(q[i], d));
    }
  }
}

void dequant_q4_1(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock;
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* p = w + o * nb * kQ4_1Bytes;
    float* dst = out + (o - o0) * K;
    for (int64_t b = 0; b < nb; ++b, p += kQ4_1Bytes, dst += kQBlock) {
      __m256 q[4];
      q4_1_block(p, q);
      const __m256 d = bcast_half(H, p), m = bcast_half(H, p + 2);
      for (int i = 0; i < 4; ++i) _mm256_storeu_ps(dst + 8 * i, _mm256_add_ps(_mm256_mul_ps(q[i], d), m));
    }
  }
}

#else
// Portable: plain loops over each block (the compiler may vectorize the inner ones).
inline int q_at(const uint8_t* p, int format, int j) {
  if (format == kx::kQ8_0) return static_cast<int8_t>(p[2 + j]);
  return j < 16 ? (p[4 + j] & 0x0f) : (p[4 + j - 16] >> 4);
}

template <int Format>
void dequant(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock, bytes = kx::block_bytes(Format);
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* p = w + o * nb * bytes;
    float* dst = out + (o - o0) * K;
    for (int64_t b = 0; b < nb; ++b, p += bytes, dst += kQBlock) {
      const float d = half_at(H, p);
      const float m = Format == kx::kQ4_1 ? half_at(H, p + 2) : 0.f;
      for (int j = 0; j < kQBlock; ++j) {
        float v = static_cast<float>(q_at(p, Format, j)) * d;
        dst[j] = Format == kx::kQ4_1 ? v + m : v;
      }
    }
  }
}

template <int Format, int R>
void gemv(const uint8_t* w, const float* x, const float* xsum, int64_t K, const float* bias, float* y,
          int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kQBlock, bytes = kx::block_bytes(Format);
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * bytes;
    prefetch_row_ahead(w, nb * bytes, o, o1);
    float acc[R] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + b * bytes;
      const float d = half_at(H, p);
      const float m = Format == kx::kQ4_1 ? half_at(H, p + 2) : 0.f;
      float q[kQBlock];
      for (int j = 0; j < kQBlock; ++j) q[j] = static_cast<float>(q_at(p, Format, j));
      for (int r = 0; r < R; ++r) {
        const float* xr = x + r * K + b * kQBlock;
        float t = 0.f;
        for (int j = 0; j < kQBlock; ++j) t += q[j] * xr[j];
        acc[r] += d * t + (Format == kx::kQ4_1 ? m * xsum[r * nb + b] : 0.f);
      }
    }
    for (int r = 0; r < R; ++r) y[r * ldy + o] = bias ? acc[r] + bias[o] : acc[r];
  }
}
template <int R>
void gemv_q8_0(const uint8_t* w, const float* x, const float* xp, int64_t K, const float* bias, float* y, int64_t ldy,
               int64_t o0, int64_t o1) {
  gemv<kx::kQ8_0, R>(w, x, xp, K, bias, y, ldy, o0, o1);
}
template <int R>
void gemv_q4_1(const uint8_t* w, const float* x, const float* xp, int64_t K, const float* bias, float* y, int64_t ldy,
               int64_t o0, int64_t o1) {
  gemv<kx::kQ4_1, R>(w, x, xp, K, bias, y, ldy, o0, o1);
}
void dequant_q8_0(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  dequant<kx::kQ8_0>(w, K, out, o0, o1);
}
void dequant_q4_1(const uint8_t* w, int64_t K, float* out, int64_t o0, int64_t o1) {
  dequant<kx::kQ4_1>(w, K, out, o0, o1);
}
#endif

#include "qlinear_int8.h"

// A path whose unit is compiled without VNNI also carries a VNNI variant, compiled for that target
// alone and taken when the CPU has it and `allow_vnni` (torch_binding.cpp: set_int8_dot, or
// KERNEL_EXPLORER_NO_VNNI=1, runs the maddubs code on a VNNI machine, so both are tested here):
// the avx512 path (AVX-512 without BF16) takes AVX512-VNNI (Cascade Lake, Ice Lake), the avx2 path
// AVX-VNNI's 256-bit vpdpbusd (Alder Lake and later, Zen 5). Activations and GEMM of one call take
// the same variant (their activation offsets differ): the caller passes one `allow_vnni` to both.
#if defined(CPU_CAPABILITY_AVX512) && !defined(__AVX512VNNI__)
#pragma GCC push_options
#pragma GCC target("avx512vnni")
#define KX_I8_NS i8v
#define KX_I8_VNNI 1
#include "qlinear_int8.h"
#pragma GCC pop_options
#define KX_I8_VARIANT "avx512vnni"
#define KX_I8_VARIANT_DOT "vpdpbusd-zmm"
#elif defined(CPU_CAPABILITY_AVX2)
#pragma GCC push_options
#pragma GCC target("avxvnni")
#define KX_I8_NS i8v
#define KX_I8_VNNI 1
#define KX_I8_YMM 1
#include "qlinear_int8.h"
#pragma GCC pop_options
#define KX_I8_VARIANT "avxvnni"
#define KX_I8_VARIANT_DOT "vpdpbusd-ymm"
#endif

#if defined(KX_I8_VARIANT)
inline bool i8_vnni(bool allow_vnni) {
  static const bool has = __builtin_cpu_supports(KX_I8_VARIANT) != 0;
  return allow_vnni && has;
}
template <int F>
void i8_quant_acts(const float* x, int64_t rows, int64_t K, uint8_t* q, float* d, float* s, uint8_t* q2, float* d2,
                   bool allow_vnni) {
  if (i8_vnni(allow_vnni)) return i8v::quant_acts<F>(x, rows, K, q, d, s, q2, d2);
  i8::quant_acts<F>(x, rows, K, q, d, s, q2, d2);
}
template <int F>
void i8_gemm(const uint8_t* w, int64_t K, const uint8_t* xq, const float* xd, const float* xs, const uint8_t* xq2,
             const float* xd2, int64_t M, const float* bias, float* y, int64_t ldy, int64_t n0, int64_t n1,
             bool allow_vnni) {
  if (i8_vnni(allow_vnni)) return i8v::gemm<F>(w, K, xq, xd, xs, xq2, xd2, M, bias, y, ldy, n0, n1);
  i8::gemm<F>(w, K, xq, xd, xs, xq2, xd2, M, bias, y, ldy, n0, n1);
}
inline const char* i8_dot(bool allow_vnni) {
  return i8_vnni(allow_vnni) ? KX_I8_VARIANT_DOT : "vpmaddubsw";
}
#else
template <int F>
void i8_quant_acts(const float* x, int64_t rows, int64_t K, uint8_t* q, float* d, float* s, uint8_t* q2, float* d2,
                   bool) {
  i8::quant_acts<F>(x, rows, K, q, d, s, q2, d2);
}
template <int F>
void i8_gemm(const uint8_t* w, int64_t K, const uint8_t* xq, const float* xd, const float* xs, const uint8_t* xq2,
             const float* xd2, int64_t M, const float* bias, float* y, int64_t ldy, int64_t n0, int64_t n1, bool) {
  i8::gemm<F>(w, K, xq, xd, xs, xq2, xd2, M, bias, y, ldy, n0, n1);
}
// the one instruction this unit has: VNNI's on the avx512bf16 path, plain C++ on the portable one
inline const char* i8_dot(bool) {
#if defined(__AVX512VNNI__)
  return "vpdpbusd-zmm";
#else
  return "scalar";
#endif
}
#endif
#include "qlinear_gemv_i8.h"
static_assert(gemv8::kScales == kx::kGemvI8Scales, "the table's count of scales per block");
#include "qlinear_gemv_x16.h"

#define KX_I8_QUANT(F) i8_quant_acts<F>
#define KX_I8_GEMM(F) i8_gemm<F>

// The table's entry: one pass over rows of x (1 to kGemvRows), each specialised on the count so
// the accumulators stay in registers.
#define KX_GEMV_BY_ROWS(fn)                                                                            \
  [](const uint8_t* w, const float* x, const float* xp, int64_t rows, int64_t K, const float* bias,  \
     float* y, int64_t ldy, int64_t o0, int64_t o1) {                                                \
    switch (rows) {                                                                                  \
      case 1: return fn<1>(w, x, xp, K, bias, y, ldy, o0, o1);                                       \
      case 2: return fn<2>(w, x, xp, K, bias, y, ldy, o0, o1);                                       \
      case 3: return fn<3>(w, x, xp, K, bias, y, ldy, o0, o1);                                       \
      default: return fn<4>(w, x, xp, K, bias, y, ldy, o0, o1);                                      \
    }                                                                                                \
  }

static_assert(kx::kGemvRows == 4, "KX_GEMV_BY_ROWS covers 1 to 4 rows");

}  // namespace KX_ISA_NS

extern const kx::QLinearTable KX_CAT(kx_qlinear_table_, KX_ISA) = {
    {KX_GEMV_BY_ROWS(KX_ISA_NS::gemv_q8_0), KX_GEMV_BY_ROWS(KX_ISA_NS::gemv_q4_1)},
    {KX_ISA_NS::dequant_q8_0, KX_ISA_NS::dequant_q4_1},
    {KX_ISA_NS::KX_I8_QUANT(kx::kQ8_0), KX_ISA_NS::KX_I8_QUANT(kx::kQ4_1)},
    {KX_ISA_NS::KX_I8_GEMM(kx::kQ8_0), KX_ISA_NS::KX_I8_GEMM(kx::kQ4_1)},
    KX_ISA_NS::i8_dot,
    KX_ISA_NS::gemv8::quant_acts,
    {KX_ISA_NS::gemv8::gemv_rows<kx::kQ8_0>, KX_ISA_NS::gemv8::gemv_rows<kx::kQ4_1>},
    {KX_ISA_NS::gemv16::gemv_rows<kx::kQ8_0>, KX_ISA_NS::gemv16::gemv_rows<kx::kQ4_1>},
};
