// Flash attention on the CPU: keys in blocks, an online softmax, no score matrix larger than one
// block. Compiled once per ISA (see kx_vec.h); the registration unit cuts calls into tasks.
//
// Prefill tasks (many query rows) keep everything "rows along the vector": Q is packed transposed
// (head_dim x rows), so the scores of a key block come out transposed (keys x rows) from
// broadcast-K times Q^T FMAs, the row maxima, exponentials and sums of the online softmax are
// plain vertical vector operations, and the output accumulates transposed (head_dim x rows) from
// broadcast-V times P^T FMAs. Nothing needs a horizontal reduction, and K and V are read in the
// layout they arrive in (float32 straight from the caller's tensor, 16-bit types widened one key
// block at a time). Decode tasks (a few rows, many keys) take dot products along head_dim.
#include "flash_attn_table.h"
#include "kx_vec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace KX_ISA_NS {
using kx::VecF;
constexpr int64_t kV = kx::kVecF;
constexpr int64_t kBK = 64;  // keys per block
#if defined(CPU_CAPABILITY_AVX512)
constexpr int kJT = 4;  // keys per score tile (x 2 row vectors x 2 chains = 16 accumulators of 32 registers)
constexpr int kDT = 8;  // head_dim elements per output tile
constexpr int64_t kRowsPerTask = 192;
#else
constexpr int kJT = 2;  // 8 accumulators of AVX2's 16 registers
constexpr int kDT = 4;
constexpr int64_t kRowsPerTask = 96;
#endif
constexpr int64_t kDecodeRows = 8;  // at most this many rows: the dot-product path

// The register tiles below hold their accumulators in arrays of at::vec::Vectorized. Compiled as
// functions of their own (GCC 12 kept the AVX-512 ones out of line, the AVX2 ones inlined), the
// arrays stay in memory: every iteration of the AVX-512 score and value tiles stored all 16
// accumulators back to the stack (16 zmm stores per 16 FMAs), which halved the AVX-512 prefill
// against AVX2's on a Zen 4 host where a 512-bit store takes two cycles. Inlined, they live in
// registers only.
#define KX_TILE inline __attribute__((always_inline))
constexpr float kInf = std::numeric_limits<float>::infinity();

template <typename T>
inline void prefetch_row(const T* row, int64_t n) {
  const char* c = reinterpret_cast<const char*>(row);
  for (int64_t b = 0; b < n * static_cast<int64_t>(sizeof(T)); b += 64) __builtin_prefetch(c + b, 0, 1);  // to L2: L1 holds the current block
}

// Scratch of one thread, reused across tasks and calls.
inline float* scratch(size_t n) {
  static thread_local kx::Scratch<float> buf;  // not std::vector: see kx::Scratch
  return buf.get(n);
}

template <typename T>
inline void to_float(const T* src, float* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    int64_t i = 0;
    VecF a, b;
    for (; i + kx::kBlock <= n; i += kx::kBlock) {
      kx::load2(src + i, a, b);
      a.store(dst + i);
      b.store(dst + i + kV);
    }
    if (i < n) {
      kx::load2_tail(src + i, n - i, a, b);
      a.store(dst + i, std::min(n - i, kV));
      if (n - i > kV) b.store(dst + i + kV, n - i - kV);
    }
  }
}

template <typename T>
inline void from_float(const float* src, T* dst, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  } else {
    int64_t i = 0;
    for (; i + kx::kBlock <= n; i += kx::kBlock) kx::store2(dst + i, VecF::loadu(src + i), VecF::loadu(src + i + kV));
    if (i < n) {
      VecF a = VecF::loadu(src + i, std::min(n - i, kV));
      VecF b = n - i > kV ? VecF::loadu(src + i + kV, n - i - kV) : VecF(0.f);
      kx::store2_tail(dst + i, n - i, a, b);
    }
  }
}

// The last key (exclusive) any row of the task may see, and each row's own limit.
inline int64_t key_end(const kx::AttnProblem& p, const kx::AttnTask& t) {
  if (!p.causal) return t.k_end;
  return std::max(t.k_begin, std::min(t.k_end, t.q0 + t.nq + t.lk - t.lq));
}

// Writes one finished row: o / l into out, m + log(l) into lse; a row that saw no key is 0.
template <typename T>
inline void finish_row(const kx::AttnProblem& p, const kx::AttnTask& t, int64_t r, float* o, float m, float l) {
  const int64_t D = p.head_dim;
  const int64_t tok = t.q0 + r / p.group, h = t.kv_head * p.group + r % p.group;
  T* dst = static_cast<T*>(p.out) + t.out_off + tok * p.out_tok + h * p.out_head;
  float* lse = p.lse + t.lse_off + tok * p.lse_tok + h * p.lse_head;
  if (m == -kInf || !(l > 0.f)) {
    std::fill(o, o + D, 0.f);
    *lse = kInf;  // as flash-attn: no key, infinite log-sum-exp
  } else {
    const VecF lv(l);  // a division, not a multiply by 1/l: one rounding instead of two
    int64_t d = 0;
    for (; d + kV <= D; d += kV) (VecF::loadu(o + d) / lv).store(o + d);
    for (; d < D; ++d) o[d] /= l;
    *lse = m + std::log(l);
  }
  from_float(o, dst, D);
}

// S^T[j][i] = sum_d K[j][d] * QT[d][i] for NJ keys from j and two row vectors from i. Even and
// odd d accumulate apart (two shorter chains round less than one long one: the scores' error is
// what the exponentials amplify).
template <int NJ>
KX_TILE void score_tile(const float* k, int64_t ks, const float* qt, int64_t rp, float* st, int64_t D) {
  VecF acc[2][NJ][2];
  for (int c = 0; c < 2; ++c) {
    for (int jj = 0; jj < NJ; ++jj) acc[c][jj][0] = acc[c][jj][1] = VecF(0.f);
  }
  auto step = [&](int c, int64_t d) {
    const VecF q0 = VecF::loadu(qt + d * rp), q1 = VecF::loadu(qt + d * rp + kV);
    for (int jj = 0; jj < NJ; ++jj) {
      const VecF kb(k[jj * ks + d]);
      acc[c][jj][0] = at::vec::fmadd(kb, q0, acc[c][jj][0]);
      acc[c][jj][1] = at::vec::fmadd(kb, q1, acc[c][jj][1]);
    }
  };
  int64_t d = 0;
  for (; d + 2 <= D; d += 2) step(0, d), step(1, d + 1);
  if (d < D) step(0, d);
  for (int jj = 0; jj < NJ; ++jj) {
    (acc[0][jj][0] + acc[1][jj][0]).store(st + jj * rp);
    (acc[0][jj][1] + acc[1][jj][1]).store(st + jj * rp + kV);
  }
}

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
constexpr bool kDotBf16 = true;
// The score tile of bfloat16 inputs with vdpbf16ps (two products per lane per instruction): Q^T
// packed as bfloat16 pairs (d, d + 1) per row, each key's pair broadcast straight from its row.
// The products are exact in float32; the scale is applied to the sums.
template <int NJ>
KX_TILE void score_tile_bf16(const c10::BFloat16* k, int64_t ks, const uint16_t* q2, int64_t rp, float* st,
                            int64_t D, float scale) {
  __m512 acc[2][NJ][2];
  for (int c = 0; c < 2; ++c) {
    for (int jj = 0; jj < NJ; ++jj) acc[c][jj][0] = acc[c][jj][1] = _mm512_setzero_ps();
  }
  auto step = [&](int c, int64_t dp) {
    const uint16_t* qq = q2 + dp * 2 * rp;
    const __m512bh q0 = (__m512bh)_mm512_loadu_si512(qq), q1 = (__m512bh)_mm512_loadu_si512(qq + 2 * kV);
    for (int jj = 0; jj < NJ; ++jj) {
      int32_t pair;
      std::memcpy(&pair, k + jj * ks + 2 * dp, sizeof(pair));
      const __m512bh kb = (__m512bh)_mm512_set1_epi32(pair);
      acc[c][jj][0] = _mm512_dpbf16_ps(acc[c][jj][0], q0, kb);
      acc[c][jj][1] = _mm512_dpbf16_ps(acc[c][jj][1], q1, kb);
    }
  };
  const int64_t pairs = D / 2;
  int64_t dp = 0;
  for (; dp + 2 <= pairs; dp += 2) step(0, dp), step(1, dp + 1);
  if (dp < pairs) step(0, dp);
  const __m512 sc = _mm512_set1_ps(scale);
  for (int jj = 0; jj < NJ; ++jj) {
    _mm512_storeu_ps(st + jj * rp, _mm512_mul_ps(_mm512_add_ps(acc[0][jj][0], acc[1][jj][0]), sc));
    _mm512_storeu_ps(st + jj * rp + kV, _mm512_mul_ps(_mm512_add_ps(acc[0][jj][1], acc[1][jj][1]), sc));
  }
}
#else
constexpr bool kDotBf16 = false;
#endif

// OT[d][i] += sum_j V[j][d] * PT[j][i] for ND head_dim elements from d and two row vectors.
template <int ND>
KX_TILE void value_tile(const float* v, int64_t vs, const float* pt, int64_t rp, float* ot, int64_t bk) {
  VecF acc[ND][2];
  for (int dd = 0; dd < ND; ++dd) {
    acc[dd][0] = VecF::loadu(ot + dd * rp);
    acc[dd][1] = VecF::loadu(ot + dd * rp + kV);
  }
  for (int64_t j = 0; j < bk; ++j) {
    const VecF p0 = VecF::loadu(pt + j * rp), p1 = VecF::loadu(pt + j * rp + kV);
    for (int dd = 0; dd < ND; ++dd) {
      const VecF vb(v[j * vs + dd]);
      acc[dd][0] = at::vec::fmadd(vb, p0, acc[dd][0]);
      acc[dd][1] = at::vec::fmadd(vb, p1, acc[dd][1]);
    }
  }
  for (int dd = 0; dd < ND; ++dd) {
    acc[dd][0].store(ot + dd * rp);
    acc[dd][1].store(ot + dd * rp + kV);
  }
}

template <typename T>
void prefill_task(const kx::AttnProblem& p, const kx::AttnTask& t, const kx::AttnPartial* partial) {
  const int64_t D = p.head_dim, G = p.group, R = t.nq * G;
  const int64_t rp = (R + 2 * kV - 1) / (2 * kV) * (2 * kV);  // rows padded to whole tiles
  float* qt = scratch(static_cast<size_t>(rp) * (2 * D + kBK + 4) + 2 * kBK * D + 64);
  float* ot = qt + D * rp;
  float* st = ot + D * rp;
  float* m = st + kBK * rp;
  float* l = m + rp;
  float* lim = l + rp;
  float* alpha = lim + rp;
  float* kf = alpha + rp;
  float* vf = kf + kBK * D + 48;  // off by 192 bytes: K and V rows never 4 KiB apart (aliasing stalls)

  std::fill(qt, qt + D * rp, 0.f);
  std::fill(ot, ot + D * rp, 0.f);
  const T* q = static_cast<const T*>(p.q) + t.q_off;
  // bfloat16 scores with vdpbf16ps where this unit has it (Q^T as raw bfloat16 pairs in qt).
  constexpr bool dot16 = kDotBf16 && std::is_same_v<T, c10::BFloat16>;
  const bool pairs = dot16 && D % 2 == 0;
  uint16_t* q2 = reinterpret_cast<uint16_t*>(qt);
  for (int64_t r = 0; r < R; ++r) {
    const T* row = q + (t.q0 + r / G) * p.q_tok + (t.kv_head * G + r % G) * p.q_head;
    if (pairs) {
      for (int64_t d = 0; d < D; ++d) std::memcpy(q2 + (d / 2) * 2 * rp + 2 * r + (d & 1), row + d, 2);
    } else {
      for (int64_t d = 0; d < D; ++d) qt[d * rp + r] = static_cast<float>(row[d]) * p.scale;
    }
  }
  for (int64_t r = 0; r < rp; ++r) {
    m[r] = -kInf;
    l[r] = 0.f;
    lim[r] = (p.causal && r < R) ? static_cast<float>(t.q0 + r / G + t.lk - t.lq) : 3e38f;
  }
  const float min_lim = static_cast<float>(t.q0 + t.lk - t.lq);
  const int64_t kend = key_end(p, t);
  const T* kbase = static_cast<const T*>(p.k) + t.k_off + t.kv_head * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + t.v_off + t.kv_head * p.v_head;

  for (int64_t k0 = t.k_begin; k0 < kend; k0 += kBK) {
    const int64_t bk = std::min(kBK, kend - k0);
    // K and V rows of the block copied together (widened to float32, except K for vdpbf16ps),
    // while the next block's rows are prefetched: rows strided by the other heads, read from L3,
    // made the kernel twice slower once a sequence's K and V outgrew L2.
    const int64_t next_bk = std::min(kBK, kend - k0 - bk);
    for (int64_t j = 0; j < bk; ++j) {
      if (j < next_bk) {
        prefetch_row(kbase + (k0 + bk + j) * p.k_tok, D);
        prefetch_row(vbase + (k0 + bk + j) * p.v_tok, D);
      }
      if (pairs) {
        std::memcpy(kf + j * D / 2, kbase + (k0 + j) * p.k_tok, static_cast<size_t>(D) * sizeof(T));
      } else {
        to_float(kbase + (k0 + j) * p.k_tok, kf + j * D, D);
      }
      to_float(vbase + (k0 + j) * p.v_tok, vf + j * D, D);
    }
    const float* kp = kf;
    const float* vp = vf;
    const int64_t ks = D, vs = D;
    // Scores, transposed: st[j][i].
    for (int64_t i = 0; i < rp; i += 2 * kV) {
      int64_t j = 0;
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
      if constexpr (dot16) {
        if (pairs) {
          const T* kr = reinterpret_cast<const T*>(kf);  // raw bfloat16 rows of D
          for (; j + kJT <= bk; j += kJT) score_tile_bf16<kJT>(kr + j * D, D, q2 + 2 * i, rp, st + j * rp + i, D, p.scale);
          for (; j < bk; ++j) score_tile_bf16<1>(kr + j * D, D, q2 + 2 * i, rp, st + j * rp + i, D, p.scale);
          continue;
        }
      }
#endif
      for (; j + kJT <= bk; j += kJT) score_tile<kJT>(kp + j * ks, ks, qt + i, rp, st + j * rp + i, D);
      for (; j < bk; ++j) score_tile<1>(kp + j * ks, ks, qt + i, rp, st + j * rp + i, D);
    }
    // The causal mask, only on blocks that reach past some row's last key.
    if (p.causal && static_cast<float>(k0 + bk - 1) > min_lim) {
      for (int64_t j = 0; j < bk; ++j) {
        const VecF kj(static_cast<float>(k0 + j));
        for (int64_t i = 0; i < rp; i += kV) {
          VecF s = VecF::loadu(st + j * rp + i);
          VecF::blendv(s, VecF(-kInf), VecF::loadu(lim + i) < kj).store(st + j * rp + i);
        }
      }
    }
    // The key mask: a masked key's scores are -inf for every row.
    if (t.key_mask) {
      for (int64_t j = 0; j < bk; ++j) {
        if (!t.key_mask[k0 + j]) std::fill(st + j * rp, st + (j + 1) * rp, -kInf);
      }
    }
    // Online softmax, vertical along the keys of the block.
    for (int64_t i = 0; i < rp; i += kV) {
      VecF mb(-kInf);
      for (int64_t j = 0; j < bk; ++j) mb = at::vec::maximum(mb, VecF::loadu(st + j * rp + i));
      const VecF m_old = VecF::loadu(m + i);
      const VecF m_new = at::vec::maximum(m_old, mb);
      const VecF m_safe = VecF::blendv(m_new, VecF(0.f), m_new == VecF(-kInf));
      const VecF a = kx::exp_fast(m_old - m_safe);
      VecF sum(0.f);
      for (int64_t j = 0; j < bk; ++j) {
        const VecF e = kx::exp_fast(VecF::loadu(st + j * rp + i) - m_safe);
        e.store(st + j * rp + i);
        sum = sum + e;
      }
      at::vec::fmadd(VecF::loadu(l + i), a, sum).store(l + i);
      m_new.store(m + i);
      a.store(alpha + i);
    }
    if (k0 != t.k_begin) {
      for (int64_t d = 0; d < D; ++d) {
        for (int64_t i = 0; i < rp; i += kV) (VecF::loadu(ot + d * rp + i) * VecF::loadu(alpha + i)).store(ot + d * rp + i);
      }
    }
    for (int64_t i = 0; i < rp; i += 2 * kV) {
      int64_t d = 0;
      for (; d + kDT <= D; d += kDT) value_tile<kDT>(vp + d, vs, st + i, rp, ot + d * rp + i, bk);
      for (; d < D; ++d) value_tile<1>(vp + d, vs, st + i, rp, ot + d * rp + i, bk);
    }
  }

  // Rows back from the transposed accumulator.
  float* row = kf;  // free now
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t d = 0; d < D; ++d) row[d] = ot[d * rp + r];
    if (partial) {
      std::memcpy(partial->o + r * D, row, static_cast<size_t>(D) * sizeof(float));
      partial->m[r] = m[r];
      partial->l[r] = l[r];
    } else {
      finish_row<T>(p, t, r, row, m[r], l[r]);
    }
  }
}

inline float hsum(const VecF& v) {
  return at::vec::vec_reduce_all<float>([](VecF& a, VecF& b) { return a + b; }, v);
}

// The sums of four vectors: one shuffle tree for the four instead of four.
inline void hsum4(const VecF* a, float* out) {
#if defined(CPU_CAPABILITY_AVX512)
  __m256 h[4];
  for (int c = 0; c < 4; ++c) {
    const __m512 v = a[c];
    h[c] = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  }
#elif defined(CPU_CAPABILITY_AVX2)
  __m256 h[4] = {a[0], a[1], a[2], a[3]};
#endif
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  const __m256 z = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
  _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(z), _mm256_extractf128_ps(z, 1)));
#else
  for (int c = 0; c < 4; ++c) out[c] = hsum(a[c]);
#endif
}

// o[0 : NV vectors] += sum_j p[j] * v[j][0 : NV vectors], the accumulators held in registers.
template <int NV>
KX_TILE void pv_row(float* o, const float* v, int64_t vs, const float* p, int64_t bk) {
  VecF acc[NV];
  for (int c = 0; c < NV; ++c) acc[c] = VecF::loadu(o + c * kV);
  for (int64_t j = 0; j < bk; ++j) {
    const VecF pj(p[j]);
    for (int c = 0; c < NV; ++c) acc[c] = at::vec::fmadd(pj, VecF::loadu(v + j * vs + c * kV), acc[c]);
  }
  for (int c = 0; c < NV; ++c) acc[c].store(o + c * kV);
}

// A few rows against many keys: scores as dot products along head_dim, the output along head_dim.
template <typename T>
void decode_task(const kx::AttnProblem& p, const kx::AttnTask& t, const kx::AttnPartial* partial) {
  const int64_t D = p.head_dim, G = p.group, R = t.nq * G;
  const int64_t dv = D / kV * kV;  // whole vectors of head_dim
  float* qf = scratch(static_cast<size_t>(R) * (2 * D + kBK + 3) + 2 * kBK * D);
  float* o = qf + R * D;
  float* s = o + R * D;
  float* m = s + R * kBK;
  float* l = m + R;
  float* lim = l + R;
  float* kf = lim + R;
  float* vf = kf + kBK * D;
  const T* q = static_cast<const T*>(p.q) + t.q_off;
  for (int64_t r = 0; r < R; ++r) {
    to_float(q + (t.q0 + r / G) * p.q_tok + (t.kv_head * G + r % G) * p.q_head, qf + r * D, D);
    for (int64_t d = 0; d < D; ++d) qf[r * D + d] *= p.scale;
    m[r] = -kInf;
    l[r] = 0.f;
    lim[r] = p.causal ? static_cast<float>(t.q0 + r / G + t.lk - t.lq) : 3e38f;
  }
  std::fill(o, o + R * D, 0.f);
  const int64_t kend = key_end(p, t);
  const T* kbase = static_cast<const T*>(p.k) + t.k_off + t.kv_head * p.k_head;
  const T* vbase = static_cast<const T*>(p.v) + t.v_off + t.kv_head * p.v_head;
  // key j past row r's causal limit, or masked
  auto hidden = [&](int64_t j, int64_t r) {
    return static_cast<float>(j) > lim[r] || (t.key_mask != nullptr && !t.key_mask[j]);
  };

  for (int64_t k0 = t.k_begin; k0 < kend; k0 += kBK) {
    const int64_t bk = std::min(kBK, kend - k0);
    const float* kp;
    const float* vp;
    int64_t ks, vs;
    if constexpr (std::is_same_v<T, float>) {
      kp = kbase + k0 * p.k_tok, ks = p.k_tok;
      vp = vbase + k0 * p.v_tok, vs = p.v_tok;
    } else {
      for (int64_t j = 0; j < bk; ++j) {
        to_float(kbase + (k0 + j) * p.k_tok, kf + j * D, D);
        to_float(vbase + (k0 + j) * p.v_tok, vf + j * D, D);
      }
      kp = kf, ks = D, vp = vf, vs = D;
    }
    int64_t j0 = 0;
    for (; j0 + 4 <= bk; j0 += 4) {  // four keys a row, their sums reduced together
      const float* kr = kp + j0 * ks;
      for (int64_t r = 0; r < R; ++r) {
        const float* qr = qf + r * D;
        VecF acc[4] = {VecF(0.f), VecF(0.f), VecF(0.f), VecF(0.f)};
        int64_t d = 0;
        for (; d < dv; d += kV) {
          const VecF qv = VecF::loadu(qr + d);
          for (int c = 0; c < 4; ++c) acc[c] = at::vec::fmadd(qv, VecF::loadu(kr + c * ks + d), acc[c]);
        }
        float dot[4];
        hsum4(acc, dot);
        for (int c = 0; c < 4; ++c) {
          for (int64_t e = d; e < D; ++e) dot[c] += qr[e] * kr[c * ks + e];
          s[r * kBK + j0 + c] = hidden(k0 + j0 + c, r) ? -kInf : dot[c];
        }
      }
    }
    for (int64_t j = j0; j < bk; ++j) {
      const float* kr = kp + j * ks;
      for (int64_t r = 0; r < R; ++r) {
        const float* qr = qf + r * D;
        VecF acc(0.f);
        int64_t d = 0;
        for (; d < dv; d += kV) acc = at::vec::fmadd(VecF::loadu(qr + d), VecF::loadu(kr + d), acc);
        float dot = hsum(acc);
        for (; d < D; ++d) dot += qr[d] * kr[d];
        s[r * kBK + j] = hidden(k0 + j, r) ? -kInf : dot;
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      float* sr = s + r * kBK;
      float mb = -kInf;
      for (int64_t j = 0; j < bk; ++j) mb = std::max(mb, sr[j]);
      const float m_new = std::max(m[r], mb);
      if (m_new == -kInf) continue;  // nothing visible yet
      const float a = std::exp(m[r] - m_new);
      float sum = 0.f;
      int64_t j = 0;
      VecF vsum(0.f);
      for (; j + kV <= bk; j += kV) {
        const VecF e = kx::exp_fast(VecF::loadu(sr + j) - VecF(m_new));
        e.store(sr + j);
        vsum = vsum + e;
      }
      for (; j < bk; ++j) sum += (sr[j] = std::exp(sr[j] - m_new));
      l[r] = l[r] * a + sum + hsum(vsum);
      m[r] = m_new;
      float* orow = o + r * D;
      if (a != 1.f) {
        for (int64_t d = 0; d < D; ++d) orow[d] *= a;
      }
      int64_t d = 0;
      for (; d + 8 * kV <= dv; d += 8 * kV) pv_row<8>(orow + d, vp + d, vs, sr, bk);
      for (; d + 4 * kV <= dv; d += 4 * kV) pv_row<4>(orow + d, vp + d, vs, sr, bk);
      for (; d + kV <= dv; d += kV) pv_row<1>(orow + d, vp + d, vs, sr, bk);
      for (; d < D; ++d) {
        for (int64_t jj = 0; jj < bk; ++jj) orow[d] += sr[jj] * vp[jj * vs + d];
      }
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    if (partial) {
      std::memcpy(partial->o + r * D, o + r * D, static_cast<size_t>(D) * sizeof(float));
      partial->m[r] = m[r];
      partial->l[r] = l[r];
    } else {
      finish_row<T>(p, t, r, o + r * D, m[r], l[r]);
    }
  }
}

// The row path, for tasks that see a few hundred keys at most (a prefill of up to a few hundred
// tokens, the demo's 16): keys along the vector. The prefill path above lays rows along the vector,
// which needs Q packed transposed and the output transposed back, element by element: at 16 tokens
// those two transposes, the zeroed padding rows and a division per padded row cost more than the
// arithmetic. Here all the task's keys are packed once as K^T (head_dim x keys, in 16 x 16
// register transposes), and a tile of a few rows at a time takes its scores over every key it
// sees, its softmax in two passes (no rescaling), and P V in registers, written straight out as
// rows: Q and the output keep their layout, and a causal tile reads no key past its last row's.
#if defined(CPU_CAPABILITY_AVX512)
constexpr int kRT = 4;  // rows per score tile (x 2 key vectors x 2 chains = 16 accumulators)
#else
constexpr int kRT = 2;  // 8 accumulators of AVX2's 16 registers
#endif
constexpr int kKT = 2;  // key vectors per score tile

// S[r][c * kV + lane] = sum_d Q[r][d] * KT[d][c * kV + lane] for NR rows from q (row stride ldq)
// and NK key vectors from kt (row stride kp); even and odd d accumulate apart, as in score_tile.
template <int NR, int NK>
KX_TILE void row_score_tile(const float* q, int64_t ldq, int64_t D, const float* kt, int64_t kp, float* s,
                            int64_t sp) {
  VecF acc[2][NR][NK];
  for (int c = 0; c < 2; ++c) {
    for (int r = 0; r < NR; ++r) {
      for (int k = 0; k < NK; ++k) acc[c][r][k] = VecF(0.f);
    }
  }
  auto step = [&](int c, int64_t d) {
    VecF kv[NK];
    for (int k = 0; k < NK; ++k) kv[k] = VecF::loadu(kt + d * kp + k * kV);
    for (int r = 0; r < NR; ++r) {
      const VecF qb(q[r * ldq + d]);
      for (int k = 0; k < NK; ++k) acc[c][r][k] = at::vec::fmadd(qb, kv[k], acc[c][r][k]);
    }
  };
  int64_t d = 0;
  for (; d + 2 <= D; d += 2) step(0, d), step(1, d + 1);
  if (d < D) step(0, d);
  for (int r = 0; r < NR; ++r) {
    for (int k = 0; k < NK; ++k) (acc[0][r][k] + acc[1][r][k]).store(s + r * sp + k * kV);
  }
}

// o_r[0 : NV vectors] += sum_j p_r[j] * v[j][0 : NV vectors] for NR rows (stride ldo in o, sp in
// p): the rows share each V load.
template <int NR, int NV>
KX_TILE void pv_rows(float* o, int64_t ldo, const float* v, int64_t vs, const float* p, int64_t sp, int64_t bk) {
  VecF acc[NR][NV];
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NV; ++c) acc[r][c] = VecF::loadu(o + r * ldo + c * kV);
  }
  for (int64_t j = 0; j < bk; ++j) {
    VecF vv[NV];
    for (int c = 0; c < NV; ++c) vv[c] = VecF::loadu(v + j * vs + c * kV);
    for (int r = 0; r < NR; ++r) {
      const VecF pj(p[r * sp + j]);
      for (int c = 0; c < NV; ++c) acc[r][c] = at::vec::fmadd(pj, vv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < NR; ++r) {
    for (int c = 0; c < NV; ++c) acc[r][c].store(o + r * ldo + c * kV);
  }
}

// PV for NR rows over bk keys, head_dim in chunks of 4 vectors, then single vectors and scalars.
template <int NR>
inline void pv_rows_all(float* o, int64_t ldo, int64_t D, const float* v, int64_t vs, const float* p, int64_t sp,
                        int64_t bk) {
  const int64_t dv = D / kV * kV;
  int64_t d = 0;
  for (; d + 4 * kV <= dv; d += 4 * kV) pv_rows<NR, 4>(o + d, ldo, v + d, vs, p, sp, bk);
  for (; d + kV <= dv; d += kV) pv_rows<NR, 1>(o + d, ldo, v + d, vs, p, sp, bk);
  for (; d < D; ++d) {
    for (int r = 0; r < NR; ++r) {
      for (int64_t j = 0; j < bk; ++j) o[r * ldo + d] += p[r * sp + j] * v[j * vs + d];
    }
  }
}

// dst[d * ld_dst + j] = src[j * ld_src + d] for n rows of D floats: a block's keys as K^T. AVX-512
// transposes 16 x 16 tiles in registers (masked at the edges), AVX2 8 x 8 tiles; the rest, element
// by element.
inline void transpose_keys(const float* src, int64_t ld_src, float* dst, int64_t ld_dst, int64_t n, int64_t D) {
#if defined(CPU_CAPABILITY_AVX512)
  at::vec::transpose_mxn<float>(src, ld_src, dst, ld_dst, static_cast<int>(n), static_cast<int>(D));
#else
  int64_t j = 0;
#if defined(CPU_CAPABILITY_AVX2)
  for (; j + 8 <= n; j += 8) {
    int64_t d = 0;
    for (; d + 8 <= D; d += 8) at::vec::transpose_mxn<float, 8, 8>(src + j * ld_src + d, ld_src, dst + d * ld_dst + j, ld_dst);
    for (; d < D; ++d) {
      for (int64_t jj = j; jj < j + 8; ++jj) dst[d * ld_dst + jj] = src[jj * ld_src + d];
    }
  }
#endif
  for (; j < n; ++j) {
    for (int64_t d = 0; d < D; ++d) dst[d * ld_dst + j] = src[j * ld_src + d];
  }
#endif
}

inline float hmax(const VecF& v) {
  return at::vec::vec_reduce_all<float>([](VecF& a, VecF& b) { return at::vec::maximum(a, b); }, v);
}

template <typename T>
void rows_task(const kx::AttnProblem& p, const kx::AttnTask& t, const kx::AttnPartial* partial) {
  const int64_t D = p.head_dim, G = p.group, R = t.nq * G;
  const int64_t kb = t.k_begin, n = key_end(p, t) - kb;  // the keys any row of the task sees
  const int64_t kp = std::max<int64_t>(kV, (n + kV - 1) / kV * kV);
  const int64_t ld = D + 16;  // a row of the tile's Q and output, off a multiple of 4 KiB
  float* kt = scratch(static_cast<size_t>(D * kp + 3 * n * D + kRT * (kp + 2 * ld) + kp) + 8 * 64);
  float* vf = kt + D * kp + 144;     // V rows in float (16-bit types)
  float* kf = vf + n * D + 176;      // K rows in float (16-bit types), before the transpose
  float* s = kf + n * D + 80;        // the tile's scores, then weights: kRT x kp
  float* qt = s + kRT * kp + 48;     // the tile's Q rows, scaled: kRT x ld
  float* ot = qt + kRT * ld + 112;   // the tile's output rows: kRT x ld
  float* kmask = ot + kRT * ld + 16;  // 0 or -inf per key (key_mask)
  const T* kbase = static_cast<const T*>(p.k) + t.k_off + t.kv_head * p.k_head + kb * p.k_tok;
  const T* vbase = static_cast<const T*>(p.v) + t.v_off + t.kv_head * p.v_head + kb * p.v_tok;
  if constexpr (std::is_same_v<T, float>) {
    transpose_keys(kbase, p.k_tok, kt, kp, n, D);
  } else {  // widened a row at a time (vectorised), then transposed as float32
    for (int64_t j = 0; j < n; ++j) to_float(kbase + j * p.k_tok, kf + j * D, D);
    transpose_keys(kf, D, kt, kp, n, D);
  }
  for (int64_t d = 0; d < D; ++d) std::fill(kt + d * kp + n, kt + (d + 1) * kp, 0.f);
  const float* vp = reinterpret_cast<const float*>(vbase);
  int64_t vs = p.v_tok;
  if constexpr (!std::is_same_v<T, float>) {
    for (int64_t j = 0; j < n; ++j) to_float(vbase + j * p.v_tok, vf + j * D, D);
    vp = vf, vs = D;
  }
  if (t.key_mask) {
    for (int64_t j = 0; j < kp; ++j) kmask[j] = (j < n && t.key_mask[kb + j]) ? 0.f : -kInf;
  }
  const T* q = static_cast<const T*>(p.q) + t.q_off;
  const VecF scale(p.scale), lane = VecF::arange(0.f, 1.f);
  // keys [kb, kb + visible(r)) are row r's by the causal limit
  auto visible = [&](int64_t r) {
    if (!p.causal) return n;
    return std::clamp<int64_t>(t.q0 + r / G + t.lk - t.lq + 1 - kb, 0, n);
  };
  auto tile = [&](auto nr_tag, int64_t r0) {
    constexpr int NR = decltype(nr_tag)::value;
    const int64_t vmax = visible(r0 + NR - 1);  // rows go up in token: the last sees the most
    const int64_t nv = (vmax + kV - 1) / kV;
    float m[NR], l[NR];
    for (int r = 0; r < NR; ++r) {
      const T* src = q + (t.q0 + (r0 + r) / G) * p.q_tok + (t.kv_head * G + (r0 + r) % G) * p.q_head;
      float* qr = qt + r * ld;
      int64_t d = 0;
      VecF a, b;
      for (; d + kx::kBlock <= D; d += kx::kBlock) {
        kx::load2(src + d, a, b);
        (a * scale).store(qr + d);
        (b * scale).store(qr + d + kV);
      }
      for (; d < D; ++d) qr[d] = static_cast<float>(src[d]) * p.scale;
    }
    int64_t c = 0;
    for (; c + kKT <= nv; c += kKT) row_score_tile<NR, kKT>(qt, ld, D, kt + c * kV, kp, s + c * kV, kp);
    for (; c < nv; ++c) row_score_tile<NR, 1>(qt, ld, D, kt + c * kV, kp, s + c * kV, kp);
    // Each row's softmax over all its keys at once (two passes, no rescaling); lanes past the
    // row's own keys, up to the tile's last row's, weigh 0.
    for (int r = 0; r < NR; ++r) {
      float* sr = s + r * kp;
      const VecF vis(static_cast<float>(visible(r0 + r)));
      VecF mv(-kInf);
      for (int64_t c2 = 0; c2 < nv; ++c2) {
        VecF x = VecF::loadu(sr + c2 * kV);
        if (t.key_mask) x = x + VecF::loadu(kmask + c2 * kV);
        x = VecF::blendv(x, VecF(-kInf), lane + VecF(static_cast<float>(c2 * kV)) >= vis);
        x.store(sr + c2 * kV);
        mv = at::vec::maximum(mv, x);
      }
      m[r] = nv ? hmax(mv) : -kInf;
      const VecF mr(m[r] == -kInf ? 0.f : m[r]);  // a row that sees nothing: exp(-inf) = 0 weights
      VecF sum(0.f);
      for (int64_t c2 = 0; c2 < nv; ++c2) {
        const VecF e = kx::exp_fast(VecF::loadu(sr + c2 * kV) - mr);
        e.store(sr + c2 * kV);
        sum = sum + e;
      }
      l[r] = hsum(sum);
      std::fill(ot + r * ld, ot + r * ld + D, 0.f);
    }
    if (vmax > 0) {
      for (int r = 0; r + 2 <= NR; r += 2) pv_rows_all<2>(ot + r * ld, ld, D, vp, vs, s + r * kp, kp, vmax);
      if (NR % 2) pv_rows_all<1>(ot + (NR - 1) * ld, ld, D, vp, vs, s + (NR - 1) * kp, kp, vmax);
    }
    for (int r = 0; r < NR; ++r) {
      if (partial) {
        std::memcpy(partial->o + (r0 + r) * D, ot + r * ld, static_cast<size_t>(D) * sizeof(float));
        partial->m[r0 + r] = m[r];
        partial->l[r0 + r] = l[r];
      } else {
        finish_row<T>(p, t, r0 + r, ot + r * ld, m[r], l[r]);
      }
    }
  };
  int64_t r0 = 0;
  for (; r0 + kRT <= R; r0 += kRT) tile(std::integral_constant<int, kRT>{}, r0);
  for (; r0 < R; ++r0) tile(std::integral_constant<int, 1>{}, r0);
}

// Keys x head_dim of a task the row path takes at once (its K^T in scratch, 64 KiB): 256 keys at
// head_dim 64. Up to there it was faster than the prefill path above on every SIMD path measured,
// SmolLM2's causal shapes on one thread (Zen 4, interleaved in one process): float32 AVX-512 at 16,
// 64, 128 and 256 tokens 1.52x, 1.65x, 1.36x and 1.15x, bfloat16 1.81x to 1.03x, AVX2 1.61x to
// 1.08x; a 512-token prefill, whose later query blocks see more keys and take the prefill path,
// 1.01x-1.05x. The portable path (at::vec's scalar loops) keeps the prefill path: the row path's
// horizontal reductions and scalar transposes made it 0.93x at 16 tokens and 0.71x at 128.
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
constexpr int64_t kRowPathKeyElems = 256 * 64;
// Below this many q elements x keys a prefill runs on the calling thread. SmolLM2's attention at
// 16 tokens (147,456) took 12.5 us on two threads against 15.3 on one (Zen 4, quiet), but waking
// the pool's thread waits for a busy core's scheduler slice (kx_limits.h); at 24 tokens (331,776)
// two threads took 0.67-0.83x one's time.
constexpr int64_t kPrefillSerialBelow = int64_t{1} << 18;
#else
constexpr int64_t kRowPathKeyElems = 0;
constexpr int64_t kPrefillSerialBelow = kx::kSerialBelow;  // scalar code: 16 tokens take ~200 us
#endif

template <typename T>
void task(const kx::AttnProblem& p, const kx::AttnTask& t, const kx::AttnPartial* partial) {
  if (t.nq * p.group <= kDecodeRows) {
    decode_task<T>(p, t, partial);
  } else if ((key_end(p, t) - t.k_begin) * p.head_dim <= kRowPathKeyElems) {
    rows_task<T>(p, t, partial);
  } else {
    prefill_task<T>(p, t, partial);
  }
}

// Softmax-weighted sum of the partials: o = sum_s e^(m_s - M) o_s / sum_s e^(m_s - M) l_s.
template <typename T>
void merge(const kx::AttnProblem& p, const kx::AttnTask& t, const kx::AttnPartial* parts, int64_t n) {
  const int64_t D = p.head_dim, R = t.nq * p.group;
  float* o = scratch(static_cast<size_t>(D));
  for (int64_t r = 0; r < R; ++r) {
    float mx = -kInf;
    for (int64_t s = 0; s < n; ++s) mx = std::max(mx, parts[s].m[r]);
    std::fill(o, o + D, 0.f);
    float l = 0.f;
    if (mx != -kInf) {
      for (int64_t s = 0; s < n; ++s) {
        if (parts[s].m[r] == -kInf) continue;
        const float w = std::exp(parts[s].m[r] - mx);
        l += w * parts[s].l[r];
        const float* os = parts[s].o + r * D;
        const VecF wv(w);
        int64_t d = 0;
        for (; d + kV <= D; d += kV) at::vec::fmadd(wv, VecF::loadu(os + d), VecF::loadu(o + d)).store(o + d);
        for (; d < D; ++d) o[d] += w * os[d];
      }
    }
    finish_row<T>(p, t, r, o, mx, l);
  }
}

}  // namespace KX_ISA_NS

extern const kx::AttnTable KX_CAT(kx_flash_attn_table_, KX_ISA) = {
    {KX_ISA_NS::task<float>, KX_ISA_NS::task<c10::BFloat16>, KX_ISA_NS::task<c10::Half>},
    {KX_ISA_NS::merge<float>, KX_ISA_NS::merge<c10::BFloat16>, KX_ISA_NS::merge<c10::Half>},
    KX_ISA_NS::kRowsPerTask,
    KX_ISA_NS::kPrefillSerialBelow,
};
