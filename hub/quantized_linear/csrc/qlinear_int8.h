// The int8 GEMM of the quantized linear kernels (prefill: many rows of activations), one
// instruction set per unit, included by qlinear_isa.h inside its KX_ISA_NS.
//
// The activations are quantized per row and per block of 32 to int8 with a float32 scale
// (d_x = max|x| / 127, q_x = round(x / d_x), as GGML's Q8 activation format does), and each
// block's dot product is taken on the integers and scaled once in float32:
//   Q8_0:  sum_j (d q_j) x_j            ~ d d_x * sum_j q_j q_xj
//   Q4_1:  sum_j (d q_j + m) x_j  = sum_j d (q_j - 8) x_j + (m + 8 d) sum_j x_j
//                                       ~ d d_x * sum_j (q_j - 8) q_xj + (m + 8 d) * sum_j x_j
// (the exact float sum of x; centring the 4-bit values halves the error the int8 activations
// bring, which multiplies d (q_j - 8) rather than d q_j, always positive).
// This is a different numeric path from PyTorch's: the activations lose bits to the 8-bit grid
// (a relative error up to 1/254 of the block's largest value per element), so results are close
// to, not rounding-equal to, a float matmul over the dequantized weights. The dequantize-and-matmul
// path (torch_binding.cpp, int8_gemm=False) keeps PyTorch's numbers.
//
// Integer dot products: AVX512-VNNI's vpdpbusd (u8 x s8, 4 products per int32 lane) where the unit
// is compiled with it (the avx512bf16 path: every CPU with AVX512-BF16 has VNNI), AVX-VNNI's
// 256-bit vpdpbusd (the avx2 path's variant for CPUs that have it: Alder Lake and later, Zen 5),
// otherwise AVX2's vpmaddubsw/vpmaddwd (also used by the avx512 path, in 256-bit registers).
// vpdpbusd and vpmaddubsw
// take one unsigned operand: the activations offset by 128 (q_x + 128; the block's -128 * sum_j q_j
// then starts the accumulator) against the signed weights, except Q8_0 under vpmaddubsw, whose
// int16 pairs would saturate (2 * 255 * 128): there |q| meets q_x carrying q's sign
// (2 * 128 * 127 < 2^15). Q4_1's pairs (2 * 255 * 8) add up in int16 over the whole block.
// Under vpmaddubsw Q8_0 needs two multiplies per 4-byte group (vpmaddubsw, then vpmaddwd to widen
// its int16 pairs, which cannot be added without saturating), so it peaks at half the rate of
// Q4_1's vpmaddubsw + vpaddw (bench/int8_peak.c maddubs_q8 against maddubs).
//
// Each thread takes whole columns (output features) and repacks their blocks into a panel in
// VNNI order (per kW features and block: 8 groups of kW x 4 weights, kW scales, kW mins or sums),
// so a vector load gives 4 consecutive weights of kW features; then an MR x (NV kW) tile of the
// output is accumulated in registers across all blocks, the panel's NV groups staying in L1
// while the quantized rows stream from L2. The panel starts on a cache line: from malloc's
// 16-byte alignment half of the 32-byte weight loads crossed a line, which cost the AVX2 tile a
// third of its speed.
//
// Included once per unit, except in the avx512 unit (AVX-512 without BF16, so compiled without
// VNNI), which also includes it under `#pragma GCC target("avx512vnni")` with KX_I8_VNNI set and
// KX_I8_NS = i8v: Cascade Lake and Ice Lake have VNNI without BF16, and take that variant when the
// CPU says so (qlinear_isa.h); and in the avx2 unit, which includes it under
// `#pragma GCC target("avxvnni")` with KX_I8_VNNI and KX_I8_YMM set (KX_I8_NS = i8v) for CPUs with
// AVX-VNNI.
#ifndef KX_I8_NS
#define KX_I8_NS i8
#endif
#if !defined(KX_I8_VNNI) && defined(CPU_CAPABILITY_AVX512) && defined(__AVX512VNNI__)
#define KX_I8_VNNI 1
#endif

#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
#include <immintrin.h>

#include <cmath>
#include <cstring>

namespace KX_I8_NS {

#if defined(KX_I8_VNNI) && !defined(KX_I8_YMM)
constexpr bool kVnni = true;
constexpr int kW = 16;  // features per vector
constexpr int kMR = 4, kNV = 2;
using VI = __m512i;
using VF = __m512;
inline VF f_zero() { return _mm512_setzero_ps(); }
inline VF f_load(const void* p) { return _mm512_loadu_ps(p); }
inline VF f_set1(float v) { return _mm512_set1_ps(v); }
inline VF f_mul(VF a, VF b) { return _mm512_mul_ps(a, b); }
inline VF f_add(VF a, VF b) { return _mm512_add_ps(a, b); }
inline VF f_fmadd(VF a, VF b, VF c) { return _mm512_fmadd_ps(a, b, c); }
inline VF i_to_f(VI a) { return _mm512_cvtepi32_ps(a); }
inline VI i_load(const void* p) { return _mm512_loadu_si512(p); }
inline VI i_zero() { return _mm512_setzero_si512(); }
inline VI i_set1(int32_t v) { return _mm512_set1_epi32(v); }
inline void f_store(float* p, VF v, int n) {
  if (n >= kW) return _mm512_storeu_ps(p, v);
  _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1), v);
}
#else
// 256-bit: AVX2's 16 registers hold the 3 x 2 tile's float and integer accumulators (12) and the
// broadcast activations; 3 rows made the maddubs tile 1.15x faster than 2 (fewer weight loads
// and scale products per dot product), 4 would spill.
#if defined(KX_I8_VNNI)
constexpr bool kVnni = true;
#else
constexpr bool kVnni = false;
#endif
constexpr int kW = 8;
constexpr int kMR = 3, kNV = 2;
using VI = __m256i;
using VF = __m256;
inline VF f_zero() { return _mm256_setzero_ps(); }
inline VF f_load(const void* p) { return _mm256_loadu_ps(static_cast<const float*>(p)); }
inline VF f_set1(float v) { return _mm256_set1_ps(v); }
inline VF f_mul(VF a, VF b) { return _mm256_mul_ps(a, b); }
inline VF f_add(VF a, VF b) { return _mm256_add_ps(a, b); }
inline VF f_fmadd(VF a, VF b, VF c) { return _mm256_fmadd_ps(a, b, c); }
inline VF i_to_f(VI a) { return _mm256_cvtepi32_ps(a); }
inline VI i_load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline VI i_zero() { return _mm256_setzero_si256(); }
inline VI i_set1(int32_t v) { return _mm256_set1_epi32(v); }
inline void f_store(float* p, VF v, int n) {
  if (n >= kW) return _mm256_storeu_ps(p, v);
  alignas(32) float t[kW];
  _mm256_store_ps(t, v);
  std::memcpy(p, t, sizeof(float) * n);
}
#endif

// One panel record: the block's weights of kW features in VNNI order (int8), then kW float scales
// d, kW float m + 8 d (Q4_1), kW int32 -128 * sum_j q_j (where the activations are offset).
constexpr int kRecW = 32 * kW;
constexpr int kRec = kRecW + 12 * kW;
constexpr int kOffD = kRecW, kOffM = kRecW + 4 * kW, kOffSum = kRecW + 8 * kW;

// Whether format F takes its activations offset by 128 (uint8) on this path.
template <int F>
constexpr bool kOffsetActs = F == kx::kQ4_1 || kVnni;

inline VI bcast4(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return i_set1(v);
}

// AVX-512: one block of 32 activations (2 zmm registers) to int8 at qb (as uint8 q + 128 where
// `offset`); returns its scale d = max|x| / 127 and, where `res`, leaves the residual x - d q in `v`.
// AVX2 (below) takes 8 blocks at a time; both compute the same values.
#if defined(CPU_CAPABILITY_AVX512)
inline float quant_block(__m512 (&v)[2], bool offset, uint8_t* qb, bool res) {
  const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_abs_ps(v[1])));
  const __m512 id = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
  const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v[0], id)), i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v[1], id));
  if (res) {
    const __m512 dv = _mm512_set1_ps(amax / 127.f);
    v[0] = _mm512_sub_ps(v[0], _mm512_mul_ps(_mm512_cvtepi32_ps(i0), dv));
    v[1] = _mm512_sub_ps(v[1], _mm512_mul_ps(_mm512_cvtepi32_ps(i1), dv));
  }
  __m128i q0 = _mm512_cvtsepi32_epi8(i0), q1 = _mm512_cvtsepi32_epi8(i1);
  if (offset) {
    q0 = _mm_xor_si128(q0, _mm_set1_epi8(char(0x80)));
    q1 = _mm_xor_si128(q1, _mm_set1_epi8(char(0x80)));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), q0);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), q1);
  return amax / 127.f;
}
#else
// max|x| of a block, in every lane
inline __m256 block_amax(const __m256 (&v)[4]) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                           _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
  m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
  m = _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0x4e));
  return _mm256_max_ps(m, _mm256_shuffle_ps(m, m, 0xb1));
}

// 127 / max|x| (0 where max|x| is 0) and max|x| / 127 of 8 blocks, one vector division each
inline void scales8(const float* amax, float* id, float* dv) {
  const __m256 m = _mm256_load_ps(amax);
  _mm256_store_ps(id, _mm256_and_ps(_mm256_div_ps(_mm256_set1_ps(127.f), m),
                                    _mm256_cmp_ps(m, _mm256_setzero_ps(), _CMP_GT_OQ)));
  _mm256_store_ps(dv, _mm256_div_ps(m, _mm256_set1_ps(127.f)));
}

// The block in v to int8 at qb with the scale's inverse id (as uint8 q + 128 where `offset`);
// where `res`, leaves the residual x - dv q in v.
inline void quant_block(__m256 (&v)[4], __m256 id, __m256 dv, bool offset, uint8_t* qb, bool res) {
  __m256i iv[4];
  for (int k = 0; k < 4; ++k) iv[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
  if (res) {
    for (int k = 0; k < 4; ++k) v[k] = _mm256_sub_ps(v[k], _mm256_mul_ps(_mm256_cvtepi32_ps(iv[k]), dv));
  }
  __m256i i0 = _mm256_packs_epi16(_mm256_packs_epi32(iv[0], iv[1]), _mm256_packs_epi32(iv[2], iv[3]));
  i0 = _mm256_permutevar8x32_epi32(i0, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  if (offset) i0 = _mm256_xor_si256(i0, _mm256_set1_epi8(char(0x80)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qb), i0);
}

// The blocks [0, n) (n <= 8) of xb: the scales of all n first, then the values (and the residual's
// likewise, where q2): one vector division per 8 blocks, and no block waits on a scalar division
// of its own (the per-block form was bound by that chain, 12 ns a block with the residual).
template <int F>
void quant_blocks(const float* xb, int n, uint8_t* q, float* d, float* s, uint8_t* q2, float* d2) {
  alignas(32) float amax[8] = {}, id[8], dv[8], r[8 * kx::kQBlock];
  for (int j = 0; j < n; ++j) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + j * kx::kQBlock + 8 * k);
    amax[j] = _mm256_cvtss_f32(block_amax(v));
    if (F == kx::kQ4_1) {  // summed in _mm512_reduce_add_ps's pairs, so every SIMD path gets the same s
      __m256 t = _mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3]));
      __m128 t4 = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
      t4 = _mm_add_ps(t4, _mm_movehl_ps(t4, t4));
      s[j] = _mm_cvtss_f32(_mm_add_ss(t4, _mm_movehdup_ps(t4)));
    }
  }
  scales8(amax, id, dv);
  for (int j = 0; j < n; ++j) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(xb + j * kx::kQBlock + 8 * k);
    quant_block(v, _mm256_set1_ps(id[j]), _mm256_set1_ps(dv[j]), kOffsetActs<F>, q + j * kx::kQBlock, q2);
    d[j] = dv[j];
    if (!q2) continue;
    for (int k = 0; k < 4; ++k) _mm256_store_ps(r + j * kx::kQBlock + 8 * k, v[k]);
    amax[j] = _mm256_cvtss_f32(block_amax(v));
  }
  if (!q2) return;
  scales8(amax, id, dv);
  for (int j = 0; j < n; ++j) {
    __m256 v[4];
    for (int k = 0; k < 4; ++k) v[k] = _mm256_load_ps(r + j * kx::kQBlock + 8 * k);
    quant_block(v, _mm256_set1_ps(id[j]), _mm256_set1_ps(dv[j]), kOffsetActs<F>, q2 + j * kx::kQBlock, false);
    d2[j] = dv[j];
  }
}
#endif

// Activations: rows x K float32 -> int8 per block (as uint8 q + 128 where kOffsetActs), scale
// d_x, (Q4_1) the block's exact float sum of x, and, where `q2` is given, the residual x - d_x q_x
// quantized in turn (q2, d2: a second pass, x ~ d_x q_x + d_r q_r) from the registers, in the
// same sweep over x.
template <int F>
void quant_acts(const float* x, int64_t rows, int64_t K, uint8_t* q, float* d, float* s, uint8_t* q2, float* d2) {
  const int64_t nb = K / kx::kQBlock;
#if defined(CPU_CAPABILITY_AVX512)
  for (int64_t i = 0; i < rows * nb; ++i) {
    const float* xb = x + i * kx::kQBlock;
    __m512 v[2] = {_mm512_loadu_ps(xb), _mm512_loadu_ps(xb + 16)};
    if (F == kx::kQ4_1) s[i] = _mm512_reduce_add_ps(_mm512_add_ps(v[0], v[1]));
    d[i] = quant_block(v, kOffsetActs<F>, q + i * kx::kQBlock, q2 != nullptr);
    if (q2) d2[i] = quant_block(v, kOffsetActs<F>, q2 + i * kx::kQBlock, false);
  }
#else
  for (int64_t i = 0; i < rows * nb; i += 8) {
    const int n = static_cast<int>(std::min<int64_t>(8, rows * nb - i));
    quant_blocks<F>(x + i * kx::kQBlock, n, q + i * kx::kQBlock, d + i, s + i, q2 ? q2 + i * kx::kQBlock : nullptr,
                    d2 + i);
  }
#endif
}

// Features [n0, n1) of the packed weight into `groups` panel groups of kW (zero past n1).
template <int F>
void repack(const uint8_t* w, int64_t K, int64_t n0, int64_t n1, int64_t groups, uint8_t* panel) {
  const int64_t nb = K / kx::kQBlock, bytes = kx::block_bytes(F);
  const float* H = half_table();
  std::memset(panel, 0, static_cast<size_t>(groups * nb * kRec));
  for (int64_t n = n0; n < n1; ++n) {
    const int64_t g = (n - n0) / kW, lane = (n - n0) % kW;
    const uint8_t* p = w + n * nb * bytes;
    for (int64_t b = 0; b < nb; ++b, p += bytes) {
      uint8_t* rec = panel + (g * nb + b) * kRec;
      // the 32 weights as int8 (Q4_1: q - 8), then their sum: psadbw of (q ^ 0x80) against zero
      // sums q + 128 per 8 bytes
      __m128i q0, q1;
      if (F == kx::kQ8_0) {
        q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 2));
        q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 18));
      } else {
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4)), low = _mm_set1_epi8(0x0f);
        q0 = _mm_sub_epi8(_mm_and_si128(raw, low), _mm_set1_epi8(8));
        q1 = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(raw, 4), low), _mm_set1_epi8(8));
      }
      alignas(16) uint8_t q[32];
      _mm_store_si128(reinterpret_cast<__m128i*>(q), q0);
      _mm_store_si128(reinterpret_cast<__m128i*>(q + 16), q1);
      for (int k = 0; k < 8; ++k) std::memcpy(rec + (k * kW + lane) * 4, q + 4 * k, 4);
      const float d = half_at(H, p);
      reinterpret_cast<float*>(rec + kOffD)[lane] = d;
      if (F == kx::kQ4_1) reinterpret_cast<float*>(rec + kOffM)[lane] = half_at(H, p + 2) + 8.f * d;
      if (kOffsetActs<F>) {
        const __m128i flip = _mm_set1_epi8(char(0x80)), z = _mm_setzero_si128();
        const __m128i t =
            _mm_add_epi64(_mm_sad_epu8(_mm_xor_si128(q0, flip), z), _mm_sad_epu8(_mm_xor_si128(q1, flip), z));
        const int32_t sum = static_cast<int32_t>(_mm_cvtsi128_si32(t) + _mm_extract_epi16(t, 4)) - 128 * 32;
        reinterpret_cast<int32_t*>(rec + kOffSum)[lane] = -128 * sum;
      }
    }
  }
}

// One 4-byte group of the block: acc += w . x for every int32 lane.
template <int F>
inline VI dot(VI acc, VI w, VI x) {
#if defined(KX_I8_VNNI) && defined(KX_I8_YMM)
  return _mm256_dpbusd_avx_epi32(acc, x, w);
#elif defined(KX_I8_VNNI)
  return _mm512_dpbusd_epi32(acc, x, w);
#else
  // The empty asm keeps each accumulator one chain: integer adds being associative, GCC 12
  // otherwise turned the block's 8 additions into a tree of temporaries, spilled to the stack
  // (35 stores and 8 loads per block in the AVX2 tile, about half its speed).
  VI sum;
  if constexpr (F == kx::kQ4_1) {  // int16 lanes: 8 groups of 2 * 255 * 8 stay below 2^15
    sum = _mm256_add_epi16(acc, _mm256_maddubs_epi16(x, w));
  } else {
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(w), _mm256_sign_epi8(x, w));
    sum = _mm256_add_epi32(acc, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
  }
#if defined(CPU_CAPABILITY_AVX512)
  __asm__("" : "+v"(sum));
#else
  __asm__("" : "+x"(sum));
#endif
  return sum;
#endif
}

// acc += the MR x (NV kW) tile's products over every block, for one set of quantized activations;
// kMin: add Q4_1's m + 8 d times the exact sums of x (the first pass only). Inlined into `tile`,
// so that `acc` stays in registers.
template <int F, int MR, int NV, bool kMin>
inline __attribute__((always_inline)) void blocks(const uint8_t* rec0, int64_t nb, const uint8_t* xq, int64_t K,
                                                  const float* xd, const float* xs, VF (&acc)[MR][NV]) {
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* rec[NV];
    VI iacc[MR][NV];
    for (int v = 0; v < NV; ++v) {
      rec[v] = rec0 + (v * nb + b) * kRec;
      const VI init = kVnni ? i_load(rec[v] + kOffSum) : i_zero();
      for (int r = 0; r < MR; ++r) iacc[r][v] = init;
    }
    const uint8_t* xb = xq + b * kx::kQBlock;
    for (int k = 0; k < 8; ++k) {
      VI wv[NV];
      for (int v = 0; v < NV; ++v) wv[v] = i_load(rec[v] + k * kW * 4);
      for (int r = 0; r < MR; ++r) {
        const VI xv = bcast4(xb + r * K + 4 * k);
        for (int v = 0; v < NV; ++v) iacc[r][v] = dot<F>(iacc[r][v], wv[v], xv);
      }
    }
#if !defined(KX_I8_VNNI)
    if constexpr (F == kx::kQ4_1) {
      for (int v = 0; v < NV; ++v) {
        const VI init = i_load(rec[v] + kOffSum);
        for (int r = 0; r < MR; ++r)
          iacc[r][v] = _mm256_add_epi32(_mm256_madd_epi16(iacc[r][v], _mm256_set1_epi16(1)), init);
      }
    }
#endif
    for (int v = 0; v < NV; ++v) {
      const VF dw = f_load(rec[v] + kOffD);
      for (int r = 0; r < MR; ++r) {
        acc[r][v] = f_fmadd(i_to_f(iacc[r][v]), f_mul(dw, f_set1(xd[r * (K / kx::kQBlock) + b])), acc[r][v]);
      }
      if constexpr (F == kx::kQ4_1 && kMin) {
        const VF mw = f_load(rec[v] + kOffM);
        for (int r = 0; r < MR; ++r) acc[r][v] = f_fmadd(mw, f_set1(xs[r * (K / kx::kQBlock) + b]), acc[r][v]);
      }
    }
  }
}

// Output rows [0, MR) x columns of NV panel groups, over every block. `rec0` is block 0 of the
// first group; `ncols` the valid columns from the first group's first feature; xq2/xd2 (or null)
// the residual's quantized activations, a second pass into the same accumulators.
template <int F, int MR, int NV>
void tile(const uint8_t* rec0, int64_t nb, const uint8_t* xq, int64_t K, const float* xd, const float* xs,
          const uint8_t* xq2, const float* xd2, const float* bias, float* y, int64_t ldy, int64_t ncols) {
  VF acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int v = 0; v < NV; ++v) acc[r][v] = f_zero();
  blocks<F, MR, NV, true>(rec0, nb, xq, K, xd, xs, acc);
  if (xq2) blocks<F, MR, NV, false>(rec0, nb, xq2, K, xd2, nullptr, acc);
  for (int v = 0; v < NV; ++v) {
    const int64_t cols = ncols - v * kW;
    if (cols <= 0) break;
    const VF bv = f_load(bias + v * kW);
    for (int r = 0; r < MR; ++r) f_store(y + r * ldy + v * kW, f_add(acc[r][v], bv), cols < kW ? int(cols) : kW);
  }
}

template <int F, int MR>
void rows_tail(int64_t rows, const uint8_t* rec, int64_t nb, const uint8_t* xq, int64_t K, const float* xd,
               const float* xs, const uint8_t* xq2, const float* xd2, const float* bias, float* y, int64_t ldy,
               int64_t ncols) {
  if constexpr (MR > 0) {
    if (rows == MR) return tile<F, MR, kNV>(rec, nb, xq, K, xd, xs, xq2, xd2, bias, y, ldy, ncols);
    rows_tail<F, MR - 1>(rows, rec, nb, xq, K, xd, xs, xq2, xd2, bias, y, ldy, ncols);
  }
}

// y[:, n0:n1] (+ bias) for all M rows of the quantized activations (and their residual's, where
// xq2 is given); features in sub-panels of kSub, each repacked once into this thread's panel and
// swept over every row.
template <int F>
void gemm(const uint8_t* w, int64_t K, const uint8_t* xq, const float* xd, const float* xs, const uint8_t* xq2,
          const float* xd2, int64_t M, const float* bias, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  constexpr int64_t kSub = 128;
  const int64_t nb = K / kx::kQBlock;
  thread_local kx::Scratch<uint8_t> panel;  // not std::vector: see kx::Scratch
  thread_local kx::Scratch<float> bias_pad;
  for (int64_t s0 = n0; s0 < n1; s0 += kSub) {
    const int64_t s1 = std::min(s0 + kSub, n1);
    const int64_t groups = ((s1 - s0 + kW - 1) / kW + kNV - 1) / kNV * kNV;
    uint8_t* const pan = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(panel.get(static_cast<size_t>(groups * nb * kRec + 64))) + 63) &
        ~uintptr_t{63});
    repack<F>(w, K, s0, s1, groups, pan);
    float* const padded = bias_pad.get(static_cast<size_t>(groups * kW));
    std::memset(padded, 0, sizeof(float) * static_cast<size_t>(groups * kW));
    if (bias) std::memcpy(padded, bias + s0, sizeof(float) * (s1 - s0));
    for (int64_t g = 0; g < groups; g += kNV) {
      const uint8_t* rec = pan + g * nb * kRec;
      const int64_t ncols = s1 - s0 - g * kW;
      float* yc = y + s0 + g * kW;
      const float* bc = padded + g * kW;
      int64_t m = 0;
      auto q2 = [&](int64_t row) { return xq2 ? xq2 + row * K : nullptr; };
      for (; m + kMR <= M; m += kMR)
        tile<F, kMR, kNV>(rec, nb, xq + m * K, K, xd + m * nb, xs + m * nb, q2(m), xd2 + m * nb, bc, yc + m * ldy,
                          ldy, ncols);
      if (m < M)
        rows_tail<F, kMR - 1>(M - m, rec, nb, xq + m * K, K, xd + m * nb, xs + m * nb, q2(m), xd2 + m * nb, bc,
                              yc + m * ldy, ldy, ncols);
    }
  }
}

}  // namespace KX_I8_NS

#else
// Portable: the same arithmetic in plain loops over the GGML blocks (int8 activations, not offset).
namespace i8 {
// One block of 32 to int8 at q; returns d = max|x| / 127; where `r`, the residual x - d q there.
inline float quant_block(const float* xb, uint8_t* q, float* r) {
  float amax = 0.f;
  for (int j = 0; j < kx::kQBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
  const float id = amax > 0.f ? 127.f / amax : 0.f, d = amax / 127.f;
  for (int j = 0; j < kx::kQBlock; ++j) {
    const float v = std::nearbyint(xb[j] * id);
    q[j] = static_cast<uint8_t>(static_cast<int8_t>(v));
    if (r) r[j] = xb[j] - v * d;
  }
  return d;
}

template <int F>
void quant_acts(const float* x, int64_t rows, int64_t K, uint8_t* q, float* d, float* s, uint8_t* q2, float* d2) {
  const int64_t nb = K / kx::kQBlock;
  for (int64_t i = 0; i < rows * nb; ++i) {
    const float* xb = x + i * kx::kQBlock;
    float sum = 0.f, r[kx::kQBlock];
    for (int j = 0; j < kx::kQBlock; ++j) sum += xb[j];
    s[i] = sum;
    d[i] = quant_block(xb, q + i * kx::kQBlock, q2 ? r : nullptr);
    if (q2) d2[i] = quant_block(r, q2 + i * kx::kQBlock, nullptr);
  }
}

template <int F>
void gemm(const uint8_t* w, int64_t K, const uint8_t* xq, const float* xd, const float* xs, const uint8_t* xq2,
          const float* xd2, int64_t M, const float* bias, float* y, int64_t ldy, int64_t n0, int64_t n1) {
  const int64_t nb = K / kx::kQBlock, bytes = kx::block_bytes(F);
  const float* H = half_table();
  const int centre = F == kx::kQ4_1 ? 8 : 0;
  for (int64_t m = 0; m < M; ++m) {
    const int8_t* xr = reinterpret_cast<const int8_t*>(xq + m * K);
    const int8_t* xr2 = xq2 ? reinterpret_cast<const int8_t*>(xq2 + m * K) : nullptr;
    for (int64_t n = n0; n < n1; ++n) {
      const uint8_t* p = w + n * nb * bytes;
      float acc = 0.f;
      for (int64_t b = 0; b < nb; ++b, p += bytes) {
        int32_t dot = 0, dot2 = 0;
        for (int j = 0; j < kx::kQBlock; ++j) {
          dot += (q_at(p, F, j) - centre) * xr[b * kx::kQBlock + j];
          if (xr2) dot2 += (q_at(p, F, j) - centre) * xr2[b * kx::kQBlock + j];
        }
        const float d = half_at(H, p);
        acc += static_cast<float>(dot) * (d * xd[m * nb + b]);
        if (F == kx::kQ4_1) acc += (half_at(H, p + 2) + 8.f * d) * xs[m * nb + b];
        if (xr2) acc += static_cast<float>(dot2) * (d * xd2[m * nb + b]);
      }
      y[m * ldy + n] = bias ? acc + bias[n] : acc;
    }
  }
}
}  // namespace i8
#endif
#undef KX_I8_NS
#undef KX_I8_VNNI
#undef KX_I8_YMM
