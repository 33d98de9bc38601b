// The int8 GEMV of the quantized linear kernels (decode: 1 to kGemvRows rows of activations), one
// instruction set per unit, included by qlinear_isa.h inside its KX_ISA_NS after qlinear_int8.h.
//
// Decode reads every weight once per token, and the float GEMV (qlinear_isa.h) spent ~20 cycles
// per Q4_1 block widening 32 nibbles to float32 and multiplying them one float at a time, a
// quarter of the rate the memory streams them at. Here the activations are quantized once per
// call, as the int8 GEMM's are (qlinear_int8.h: per block of 32, d_x = max|x| / 127, and for
// float32 activations the residual in a second pass), and each weight block's dot product is
// taken on the integers straight from the GGML block, no repacking: vpmaddubsw multiplies the
// block's unsigned bytes (Q4_1's nibbles 0..15; Q8_0's |q|, the activations carrying q's sign)
// with the signed activations and adds pairs, vpmaddwd adds pairs again into 8 int32 lanes.
//
// Q4_1 keeps the int8 GEMM's numbers, whose error from the int8 activations multiplies
// d (q_j - 8), not d q_j (half as large: see qlinear_int8.h), without centring the weights:
//   sum_j (d q_j + m) x_j  ~  d (d_x sum_j q_j q_xj + 8 r) + m X,
//   r = X - d_x sum_j q_xj  (X the block's exact float sum of x; with two passes also - d_r sum_j q_rj)
// which is d d_x sum_j (q_j - 8) q_xj + (m + 8 d) X exactly. r and X are per activation block, so
// they are computed once per call, not once per weight block; in the vector loop r and X / 8 are
// added in every lane (8 lanes sum to 8 r and X).
//
// The same 256-bit code serves the avx2 and avx512 units (the avx512 unit compiles it with
// AVX-512 encodings); the avx512bf16 unit, compiled with AVX512-VNNI, fuses the two multiplies
// into vpdpbusd (`dot`).

namespace gemv8 {

// Per row of activations and block: d_x, d_r (0 with one pass), r, X / 8 (float32, in this order).
constexpr int kScales = 4;

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr bool kActsOffset = i8::kOffsetActs<kx::kQ4_1>;  // i8::quant_acts stores q + 128 for Q4_1
#else
constexpr bool kActsOffset = false;  // the portable quant_acts stores q
#endif

// rows x K float32 -> signed int8 q (and, where `two`, the residual's q2) and kScales floats per
// block (see above), through the int8 GEMM's quantizer, so both paths round x the same way.
inline void quant_acts(const float* x, int64_t rows, int64_t K, bool two, int8_t* q, int8_t* q2, float* scales) {
  const int64_t nb = K / kx::kQBlock, n = rows * nb;
  thread_local kx::Scratch<float> tmp;  // not std::vector: see kx::Scratch
  float* const d = tmp.get(static_cast<size_t>(3 * n));
  float* const sum = d + n;
  float* const d2 = sum + n;
  uint8_t* const uq = reinterpret_cast<uint8_t*>(q);
  uint8_t* const uq2 = two ? reinterpret_cast<uint8_t*>(q2) : nullptr;
  i8::quant_acts<kx::kQ4_1>(x, rows, K, uq, d, sum, uq2, d2);
  for (int64_t i = 0; i < n; ++i) {
    int32_t s1 = 0, s2 = 0;
    for (int j = 0; j < kx::kQBlock; ++j) {
      const int64_t at = i * kx::kQBlock + j;
      if constexpr (kActsOffset) uq[at] ^= 0x80;
      s1 += q[at];
      if (two) {
        if constexpr (kActsOffset) uq2[at] ^= 0x80;
        s2 += q2[at];
      }
    }
    float* s = scales + i * kScales;
    s[0] = d[i];
    s[1] = two ? d2[i] : 0.f;
    s[2] = sum[i] - d[i] * static_cast<float>(s1) - (two ? d2[i] * static_cast<float>(s2) : 0.f);
    s[3] = sum[i] * 0.125f;
  }
}

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
// A Q4_1 block's 16 bytes as 32 unsigned bytes 0..15: q0..15 (low nibbles) in the low half, q16..31
// (high nibbles) in the high half, the order of the activations.
inline __m256i nibbles(const uint8_t* p) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(raw), _mm_srli_epi16(raw, 4), 1);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

// The block's 32 products of unsigned u and signed a as 8 float32 partial sums: vpmaddubsw's int16
// pairs stay below 2^15 (Q4_1: 2 * 15 * 128; Q8_0: 2 * 128 * 127), so VNNI's vpdpbusd (one
// instruction for the two, where the unit is compiled with it: the avx512bf16 path) gives the
// same integers.
inline __m256 dot(__m256i u, __m256i a) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), u, a));
#else
  return _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_maddubs_epi16(u, a), _mm256_set1_epi16(1)));
#endif
}
inline __m256i acts(const int8_t* a) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a)); }

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// y[r * ldy + o] for the R rows and outputs [o0, o1). Even and odd blocks have accumulators of
// their own, and Q4_1's m X of its own, so that each chain takes one multiply-add every other block
// (one chain of two per block bound the loop at twice the multiply-add's latency).
template <int F, int R, bool kTwo>
void gemv(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
          float* y, int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kx::kQBlock, bytes = kx::block_bytes(F);
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * bytes;
    prefetch_row_ahead(w, nb * bytes, o, o1);
    __m256 acc[2][R], mins[2][R];
    for (int r = 0; r < R; ++r) acc[0][r] = acc[1][r] = mins[0][r] = mins[1][r] = _mm256_setzero_ps();
    auto step = [&](int64_t b, __m256 (&a)[R], __m256 (&am)[R]) {
      const uint8_t* p = row + b * bytes;
      __m256i u, sign_of;  // Q8_0: |q| and q, whose sign the activations take
      if constexpr (F == kx::kQ4_1) {
        u = nibbles(p + 4);
      } else {
        sign_of = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 2));
        u = _mm256_abs_epi8(sign_of);
      }
      const __m256 d = _mm256_set1_ps(half_at(H, p));
      for (int r = 0; r < R; ++r) {
        const int64_t at = r * K + b * kx::kQBlock;
        const float* s = scales + (r * nb + b) * kScales;
        __m256 t;
        if constexpr (F == kx::kQ4_1) {
          t = _mm256_fmadd_ps(dot(u, acts(q + at)), _mm256_set1_ps(s[0]), _mm256_set1_ps(s[2]));
          if constexpr (kTwo) t = _mm256_fmadd_ps(dot(u, acts(q2 + at)), _mm256_set1_ps(s[1]), t);
          am[r] = _mm256_fmadd_ps(_mm256_set1_ps(half_at(H, p + 2)), _mm256_set1_ps(s[3]), am[r]);
        } else {
          t = _mm256_mul_ps(dot(u, _mm256_sign_epi8(acts(q + at), sign_of)), _mm256_set1_ps(s[0]));
          if constexpr (kTwo)
            t = _mm256_fmadd_ps(dot(u, _mm256_sign_epi8(acts(q2 + at), sign_of)), _mm256_set1_ps(s[1]), t);
        }
        a[r] = _mm256_fmadd_ps(t, d, a[r]);
      }
    };
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
      step(b, acc[0], mins[0]);
      step(b + 1, acc[1], mins[1]);
    }
    if (b < nb) step(b, acc[0], mins[0]);
    for (int r = 0; r < R; ++r) {
      const __m256 sum = _mm256_add_ps(_mm256_add_ps(acc[0][r], acc[1][r]), _mm256_add_ps(mins[0][r], mins[1][r]));
      const float v = hsum8(sum);
      y[r * ldy + o] = bias ? v + bias[o] : v;
    }
  }
}
#else
// Portable: the same sums in plain loops.
template <int F, int R, bool kTwo>
void gemv(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t K, const float* bias,
          float* y, int64_t ldy, int64_t o0, int64_t o1) {
  const int64_t nb = K / kx::kQBlock, bytes = kx::block_bytes(F);
  const float* H = half_table();
  for (int64_t o = o0; o < o1; ++o) {
    const uint8_t* row = w + o * nb * bytes;
    prefetch_row_ahead(w, nb * bytes, o, o1);
    float acc[R] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* p = row + b * bytes;
      const float d = half_at(H, p);
      for (int r = 0; r < R; ++r) {
        const int64_t at = r * K + b * kx::kQBlock;
        const float* s = scales + (r * nb + b) * kScales;
        int32_t dot = 0, dot2 = 0;
        for (int j = 0; j < kx::kQBlock; ++j) {
          dot += q_at(p, F, j) * q[at + j];
          if (kTwo) dot2 += q_at(p, F, j) * q2[at + j];
        }
        float t = static_cast<float>(dot) * s[0] + static_cast<float>(dot2) * s[1];
        if (F == kx::kQ4_1) t += 8.f * s[2];
        acc[r] += t * d;
        if (F == kx::kQ4_1) acc[r] += half_at(H, p + 2) * (8.f * s[3]);
      }
    }
    for (int r = 0; r < R; ++r) y[r * ldy + o] = bias ? acc[r] + bias[o] : acc[r];
  }
}
#endif

// The table's entry: specialised on the row count (1 to kGemvRows) and the passes.
template <int F>
void gemv_rows(const uint8_t* w, const int8_t* q, const int8_t* q2, const float* scales, int64_t rows, int64_t K,
               const float* bias, float* y, int64_t ldy, int64_t o0, int64_t o1) {
  const bool two = q2 != nullptr;
  switch (rows * 2 + (two ? 1 : 0)) {
    case 2: return gemv<F, 1, false>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    case 3: return gemv<F, 1, true>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    case 4: return gemv<F, 2, false>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    case 5: return gemv<F, 2, true>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    case 6: return gemv<F, 3, false>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    case 7: return gemv<F, 3, true>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    case 8: return gemv<F, 4, false>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
    default: return gemv<F, 4, true>(w, q, q2, scales, K, bias, y, ldy, o0, o1);
  }
}

}  // namespace gemv8
