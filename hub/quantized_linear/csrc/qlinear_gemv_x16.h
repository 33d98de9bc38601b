// The int8 GEMV on a Q4_1 weight in the GEMV layout (qlinear_format.h): decode's path where the
// layer keeps that layout. Included by qlinear_isa.h inside its KX_ISA_NS after qlinear_gemv_i8.h,
// whose activations (gemv8::quant_acts: signed int8 per block of 32, and the scales d_x, d_r, r,
// X / 8) it takes, so both int8 GEMVs compute the same integers.
//
// Why a layout of its own: on GGML's row-major blocks each block's dot product ends in a
// horizontal sum and two scalar scale lookups, ~13 instructions per block and row, which kept the
// GEMV compute-bound at about half the rate memory streams the weights at. Here 16 output rows
// share each instruction: one zmm lane per row (a ymm per 8 rows on AVX2), the activations'
// 4 bytes broadcast to all of them, the 16 rows' scales converted with one vcvtph2ps. No
// horizontal sums: the 16 lanes are the 16 outputs. About 1.5 instructions per block and row.
//
// The same numbers on every path, bitwise: per output row o and block b, in this order,
//   t = fma(float(dot(q_w, q_x)), d_x, 8 r);  with two passes  t = fma(float(dot(q_w, q_r)), d_r, t)
//   acc[b & 1] = fma(d, t, acc[b & 1]);  acc[b & 1] = fma(m, X, acc[b & 1])
//   y = (acc[0] + acc[1]) (+ bias)
// which is the row-major int8 GEMV's sum d (d_x dot + 8 r) + m X (see qlinear_gemv_i8.h) in
// another order. The integer dot products are exact on every path (vpdpbusd, or vpmaddubsw's int16
// pairs: 8 of them per row and block add up to at most 8 * 2 * 15 * 127 < 2^15, then vpmaddwd).
//
// Q8_0 (lm_head in a GGUF: a third of SmolLM2-135M's bytes a token) in its GEMV layout, per row o
// and block b:  t = float(dot(q_w, q_x)) * d_x;  two passes  t = fma(float(dot(q_w, q_r)), d_r, t)
//   acc[b & 1] = fma(d, t, acc[b & 1]);  y = (acc[0] + acc[1]) (+ bias)
// The weights are signed: each multiply takes |q_w| (unsigned) and q_x with q_w's sign, which is
// q_w q_x exactly (|q_w| <= 128, |q_x| <= 127: vpmaddubsw's pairs stay below 2^15 and are widened
// per chunk).

namespace gemv16 {

using kx::kGemvGroupRows;
using kx::kQ4_1GroupBlockBytes;
using kx::kQ8_0GroupBlockBytes;

#if defined(CPU_CAPABILITY_AVX512)
inline __m512i bcast4(const int8_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm512_set1_epi32(v);
}

// The 16 rows' integer dot products of one block with 32 activations `a`: lo[c] / hi[c] hold the
// weights q[4c .. 4c+3] / q[16+4c .. 16+4c+3] of every row, as unsigned bytes 0..15.
inline __m512i dot16(const __m512i (&lo)[4], const __m512i (&hi)[4], const int8_t* a) {
#if defined(__AVX512VNNI__)
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  for (int c = 0; c < 4; ++c) {
    s0 = _mm512_dpbusd_epi32(s0, lo[c], bcast4(a + 4 * c));
    s1 = _mm512_dpbusd_epi32(s1, hi[c], bcast4(a + 16 + 4 * c));
  }
  return _mm512_add_epi32(s0, s1);
#else
  __m512i s = _mm512_maddubs_epi16(lo[0], bcast4(a));
  s = _mm512_add_epi16(s, _mm512_maddubs_epi16(hi[0], bcast4(a + 16)));
  for (int c = 1; c < 4; ++c) {
    s = _mm512_add_epi16(s, _mm512_maddubs_epi16(lo[c], bcast4(a + 4 * c)));
    s = _mm512_add_epi16(s, _mm512_maddubs_epi16(hi[c], bcast4(a + 16 + 4 * c)));
  }
  return _mm512_madd_epi16(s, _mm512_set1_epi16(1));
#endif
}

// The GEMV layout's walk, shared by the formats: per group of 16 rows, its blocks of kBytes in
// order (each prefetched 4 blocks ahead) into two accumulator chains, even and odd blocks, so that
// each chain takes one multiply-add every other block (one chain bound the loop at twice the
// multiply-add's latency); `step(p, b, acc)` adds block b, at p, to the R rows' sums.
template <int R, int64_t kBytes, typename Step>
void walk_groups(const uint8_t* w, int64_t K, const float* bias, float* y, int64_t ldy, int64_t g0, int64_t g1,
                 Step step) {
  const int64_t nb = K / kx::kQBlock;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w + g * nb * kBytes;
    __m512 acc[2][R];
    for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm512_setzero_ps();
    auto one = [&](int64_t b, __m512 (&a)[R]) {
      const uint8_t* p = group + b * kBytes;
      for (int line = 0; line < kBytes; line += 64) __builtin_prefetch(p + 4 * kBytes + line);
      step(p, b, a);
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      one(b, acc[0]);
      one(b + 1, acc[1]);
    }
    if (b < nb) one(b, acc[0]);
    for (int r = 0; r < R; ++r) {
      __m512 v = _mm512_add_ps(acc[0][r], acc[1][r]);
      if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + g * kGemvGroupRows));
      _mm512_storeu_ps(y + r * ldy + g * kGemvGroupRows, v);
    }
  }
}

template <int R, bool kTwo>
void gemv(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
          float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t nb = K / kx::kQBlock;
  const __m512i nibble = _mm512_set1_epi8(0x0f);
  walk_groups<R, kQ4_1GroupBlockBytes>(w, K, bias, y, ldy, g0, g1, [&](const uint8_t* p, int64_t b, __m512 (&a)[R]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
    __m512i lo[4], hi[4];
    for (int c = 0; c < 4; ++c) {
      const __m512i v = _mm512_loadu_si512(p + 64 + 64 * c);
      lo[c] = _mm512_and_si512(v, nibble);
      hi[c] = _mm512_and_si512(_mm512_srli_epi16(v, 4), nibble);
    }
    for (int r = 0; r < R; ++r) {
      const int64_t at = r * K + b * kx::kQBlock;
      const float* s = scales + (r * nb + b) * gemv8::kScales;
      __m512 t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot16(lo, hi, q + at)), _mm512_set1_ps(s[0]),
                                 _mm512_set1_ps(8.f * s[2]));
      if constexpr (kTwo) t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot16(lo, hi, q2 + at)), _mm512_set1_ps(s[1]), t);
      a[r] = _mm512_fmadd_ps(d, t, a[r]);
      a[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(8.f * s[3]), a[r]);
    }
  });
}

// The 16 rows' integer dot products of one Q8_0 block with 32 activations `a`: w[c] holds the
// weights q[4c .. 4c+3] of every row (int8).
inline __m512i dot16_q8(const __m512i (&w)[8], const int8_t* a) {
  __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
  for (int c = 0; c < 8; ++c) {
    const __m512i x = bcast4(a + 4 * c);
    const __m512i u = _mm512_abs_epi8(w[c]);
    const __m512i sx = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w[c]), _mm512_setzero_si512(), x);
#if defined(__AVX512VNNI__)
    __m512i& s = c & 1 ? s1 : s0;
    s = _mm512_dpbusd_epi32(s, u, sx);
#else
    const __m512i pairs = _mm512_madd_epi16(_mm512_maddubs_epi16(u, sx), _mm512_set1_epi16(1));
    if (c & 1) {
      s1 = _mm512_add_epi32(s1, pairs);
    } else {
      s0 = _mm512_add_epi32(s0, pairs);
    }
#endif
  }
  return _mm512_add_epi32(s0, s1);
}

template <int R, bool kTwo>
void gemv_q8(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
             float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t nb = K / kx::kQBlock;
  walk_groups<R, kQ8_0GroupBlockBytes>(w, K, bias, y, ldy, g0, g1, [&](const uint8_t* p, int64_t b, __m512 (&a)[R]) {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    __m512i wq[8];
    for (int c = 0; c < 8; ++c) wq[c] = _mm512_loadu_si512(p + 32 + 64 * c);
    for (int r = 0; r < R; ++r) {
      const int64_t at = r * K + b * kx::kQBlock;
      const float* s = scales + (r * nb + b) * gemv8::kScales;
      __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(dot16_q8(wq, q + at)), _mm512_set1_ps(s[0]));
      if constexpr (kTwo) t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot16_q8(wq, q2 + at)), _mm512_set1_ps(s[1]), t);
      a[r] = _mm512_fmadd_ps(d, t, a[r]);
    }
  });
}
#elif defined(CPU_CAPABILITY_AVX2)
inline __m256i bcast4(const int8_t* a) {
  int32_t v;
  std::memcpy(&v, a, 4);
  return _mm256_set1_epi32(v);
}

// As the AVX-512 dot16, for the 8 rows of one half of the group (AVX2's vpmaddubsw).
inline __m256i dot8(const __m256i (&lo)[4], const __m256i (&hi)[4], const int8_t* a) {
  __m256i s = _mm256_maddubs_epi16(lo[0], bcast4(a));
  s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi[0], bcast4(a + 16)));
  for (int c = 1; c < 4; ++c) {
    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(lo[c], bcast4(a + 4 * c)));
    s = _mm256_add_epi16(s, _mm256_maddubs_epi16(hi[c], bcast4(a + 16 + 4 * c)));
  }
  return _mm256_madd_epi16(s, _mm256_set1_epi16(1));
}

// As the AVX-512 walk_groups, a group's 16 rows in two halves of 8 (a ymm each): rows 0..7, then
// 8..15 (the group is in L1 by then, so only the first half prefetches); `step(p, b, half, acc)`.
template <int R, int64_t kBytes, typename Step>
void walk_groups(const uint8_t* w, int64_t K, const float* bias, float* y, int64_t ldy, int64_t g0, int64_t g1,
                 Step step) {
  const int64_t nb = K / kx::kQBlock;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w + g * nb * kBytes;
    for (int half = 0; half < 2; ++half) {
      __m256 acc[2][R];
      for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = _mm256_setzero_ps();
      auto one = [&](int64_t b, __m256 (&a)[R]) {
        const uint8_t* p = group + b * kBytes;
        if (half == 0) {
          for (int line = 0; line < kBytes; line += 64) __builtin_prefetch(p + 4 * kBytes + line);
        }
        step(p, b, half, a);
      };
      int64_t b = 0;
      for (; b + 2 <= nb; b += 2) {
        one(b, acc[0]);
        one(b + 1, acc[1]);
      }
      if (b < nb) one(b, acc[0]);
      const int64_t o = g * kGemvGroupRows + 8 * half;
      for (int r = 0; r < R; ++r) {
        __m256 v = _mm256_add_ps(acc[0][r], acc[1][r]);
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + o));
        _mm256_storeu_ps(y + r * ldy + o, v);
      }
    }
  }
}

template <int R, bool kTwo>
void gemv(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
          float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t nb = K / kx::kQBlock;
  const __m256i nibble = _mm256_set1_epi8(0x0f);
  walk_groups<R, kQ4_1GroupBlockBytes>(
      w, K, bias, y, ldy, g0, g1, [&](const uint8_t* p, int64_t b, int half, __m256 (&a)[R]) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * half)));
        const __m256 m = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 32 + 16 * half)));
        __m256i lo[4], hi[4];
        for (int c = 0; c < 4; ++c) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64 + 64 * c + 32 * half));
          lo[c] = _mm256_and_si256(v, nibble);
          hi[c] = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
        }
        for (int r = 0; r < R; ++r) {
          const int64_t at = r * K + b * kx::kQBlock;
          const float* s = scales + (r * nb + b) * gemv8::kScales;
          __m256 t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot8(lo, hi, q + at)), _mm256_set1_ps(s[0]),
                                     _mm256_set1_ps(8.f * s[2]));
          if constexpr (kTwo)
            t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot8(lo, hi, q2 + at)), _mm256_set1_ps(s[1]), t);
          a[r] = _mm256_fmadd_ps(d, t, a[r]);
          a[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(8.f * s[3]), a[r]);
        }
      });
}

// As the AVX-512 dot16_q8, for the 8 rows of one half of the group (vpsignb gives q_x q_w's sign).
inline __m256i dot8_q8(const __m256i (&w)[8], const int8_t* a) {
  __m256i s = _mm256_setzero_si256();
  for (int c = 0; c < 8; ++c) {
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(w[c]), _mm256_sign_epi8(bcast4(a + 4 * c), w[c]));
    s = _mm256_add_epi32(s, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
  return s;
}

template <int R, bool kTwo>
void gemv_q8(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
             float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t nb = K / kx::kQBlock;
  walk_groups<R, kQ8_0GroupBlockBytes>(
      w, K, bias, y, ldy, g0, g1, [&](const uint8_t* p, int64_t b, int half, __m256 (&a)[R]) {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * half)));
        __m256i wq[8];
        for (int c = 0; c < 8; ++c)
          wq[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * c + 32 * half));
        for (int r = 0; r < R; ++r) {
          const int64_t at = r * K + b * kx::kQBlock;
          const float* s = scales + (r * nb + b) * gemv8::kScales;
          __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot8_q8(wq, q + at)), _mm256_set1_ps(s[0]));
          if constexpr (kTwo)
            t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot8_q8(wq, q2 + at)), _mm256_set1_ps(s[1]), t);
          a[r] = _mm256_fmadd_ps(d, t, a[r]);
        }
      });
}
#else
// Portable: the same sums, row by row, in the same order (std::fma for the fused steps).
// `step(p, b, i, r, acc)` adds block b (at p) of the group's row i, for row r of x, to `acc`.
template <int R, int64_t kBytes, typename Step>
void walk_groups(const uint8_t* w, int64_t K, const float* bias, float* y, int64_t ldy, int64_t g0, int64_t g1,
                 Step step) {
  const int64_t nb = K / kx::kQBlock;
  for (int64_t g = g0; g < g1; ++g) {
    const uint8_t* group = w + g * nb * kBytes;
    for (int i = 0; i < kGemvGroupRows; ++i) {
      for (int r = 0; r < R; ++r) {
        float acc[2] = {0.f, 0.f};
        for (int64_t b = 0; b < nb; ++b) step(group + b * kBytes, b, i, r, acc[b & 1]);
        const int64_t o = g * kGemvGroupRows + i;
        const float v = acc[0] + acc[1];
        y[r * ldy + o] = bias ? v + bias[o] : v;
      }
    }
  }
}

template <int R, bool kTwo>
void gemv(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
          float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t nb = K / kx::kQBlock;
  const float* H = half_table();
  walk_groups<R, kQ4_1GroupBlockBytes>(w, K, bias, y, ldy, g0, g1, [&](const uint8_t* p, int64_t b, int i, int r, float& a) {
    const int64_t at = r * K + b * kx::kQBlock;
    int32_t dot = 0, dot2 = 0;
    for (int c = 0; c < 4; ++c) {
      for (int j = 0; j < 4; ++j) {
        const uint8_t byte = p[64 + 64 * c + 4 * i + j];
        dot += (byte & 0x0f) * q[at + 4 * c + j] + (byte >> 4) * q[at + 16 + 4 * c + j];
        if (kTwo) dot2 += (byte & 0x0f) * q2[at + 4 * c + j] + (byte >> 4) * q2[at + 16 + 4 * c + j];
      }
    }
    const float* s = scales + (r * nb + b) * gemv8::kScales;
    float t = std::fma(static_cast<float>(dot), s[0], 8.f * s[2]);
    if (kTwo) t = std::fma(static_cast<float>(dot2), s[1], t);
    a = std::fma(half_at(H, p + 2 * i), t, a);
    a = std::fma(half_at(H, p + 32 + 2 * i), 8.f * s[3], a);
  });
}

template <int R, bool kTwo>
void gemv_q8(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
             float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const int64_t nb = K / kx::kQBlock;
  const float* H = half_table();
  walk_groups<R, kQ8_0GroupBlockBytes>(w, K, bias, y, ldy, g0, g1, [&](const uint8_t* p, int64_t b, int i, int r, float& a) {
    const int64_t at = r * K + b * kx::kQBlock;
    int32_t dot = 0, dot2 = 0;
    for (int c = 0; c < 8; ++c) {
      for (int j = 0; j < 4; ++j) {
        const int32_t v = static_cast<int8_t>(p[32 + 64 * c + 4 * i + j]);
        dot += v * q[at + 4 * c + j];
        if (kTwo) dot2 += v * q2[at + 4 * c + j];
      }
    }
    const float* s = scales + (r * nb + b) * gemv8::kScales;
    float t = static_cast<float>(dot) * s[0];
    if (kTwo) t = std::fma(static_cast<float>(dot2), s[1], t);
    a = std::fma(half_at(H, p + 2 * i), t, a);
  });
}
#endif

// The table's entry: specialised on the format, the row count (1 to kGemvRows) and the passes;
// [g_begin, g_end) are groups of kGemvGroupRows output rows.
template <int F>
void gemv_rows(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t rows, int64_t K,
               const float* bias, float* y, int64_t ldy, int64_t g0, int64_t g1) {
  const bool two = q2 != nullptr;
#define KX_X16(R, TWO)                                                    \
  if constexpr (F == kx::kQ8_0) {                                         \
    return gemv_q8<R, TWO>(w, q, q2, scales, K, bias, y, ldy, g0, g1);    \
  } else {                                                                \
    return gemv<R, TWO>(w, q, q2, scales, K, bias, y, ldy, g0, g1);       \
  }
  switch (rows * 2 + (two ? 1 : 0)) {
    case 2: KX_X16(1, false)
    case 3: KX_X16(1, true)
    case 4: KX_X16(2, false)
    case 5: KX_X16(2, true)
    case 6: KX_X16(3, false)
    case 7: KX_X16(3, true)
    case 8: KX_X16(4, false)
    default: KX_X16(4, true)
  }
#undef KX_X16
}

}  // namespace gemv16