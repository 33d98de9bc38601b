// Activation kernels, compiled once per instruction set (see kx_vec.h).
//
// Each formula follows eager PyTorch operation by operation: ATen's own vectorized kernels for
// F.silu / F.gelu, and for the Python formulas of Transformers' NewGELU, FastGELU and QuickGELU a
// rounding to the storage dtype wherever eager materialises an intermediate tensor. One pass over
// memory replaces eager's five to nine, and exp comes from kx_vec.h's fast version instead of
// Sleef's (see there for the accuracy; the float32 tanh GELUs use it as x / (1 + exp(-2u))). The bfloat16 and float16 forms only fill the lookup tables
// (activation_ops.cpp), once per process, so there exactness matters more than speed.
#include "activation_table.h"
#include "kx_vec.h"

namespace KX_ISA_NS {
using kx::VecF;
using kx::exp_fast;
using kx::rnd;

// tanh rounded to T as eager stores it, for the 16-bit forms: near -1, one ulp of that 16-bit
// rounding changes `1 + tanh` by up to 100%, so they take Sleef's tanh, eager's own, and match it
// bitwise. (They only fill the lookup tables, so its cost does not matter.)
template <typename T>
inline VecF tanh_as_eager(const VecF& v) {
  return rnd<T>(v.tanh());
}

// The float32 forms of the tanh GELUs: 0.5 * x * (1 + tanh(u)) is x / (1 + exp(-2u)), one exp and
// one division where tanh takes an exp, a division, a polynomial and a blend; and no cancellation
// for u << 0, so it is closer to the exact value than eager's form (as gelu_tanh below).
inline VecF x_sigmoid_2u(const VecF& x, const VecF& u) {
  return x / (VecF(1.f) + exp_fast(u * VecF(-2.f)));
}

// erf(x) as x * P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf is 1 in float32 beyond): the
// rational approximation Eigen and XNNPACK use, within 5e-7 absolute (ATen's Abramowitz-Stegun
// form, with its exp and division, is within 6e-7) at half the instructions.
inline VecF erf_fast(const VecF& x) {
  VecF xc = at::vec::clamp(x, VecF(-4.f), VecF(4.f));
  VecF x2 = xc * xc;
  VecF p(-2.72614225801306e-10f);
  p = at::vec::fmadd(p, x2, VecF(2.77068142495902e-08f));
  p = at::vec::fmadd(p, x2, VecF(-2.10102402082508e-06f));
  p = at::vec::fmadd(p, x2, VecF(-5.69250639462346e-05f));
  p = at::vec::fmadd(p, x2, VecF(-7.34990630326855e-04f));
  p = at::vec::fmadd(p, x2, VecF(-2.95459980854025e-03f));
  p = at::vec::fmadd(p, x2, VecF(-1.60960333262415e-02f));
  VecF q(-1.45660718464996e-05f);
  q = at::vec::fmadd(q, x2, VecF(-2.13374055278905e-04f));
  q = at::vec::fmadd(q, x2, VecF(-1.68282697438203e-03f));
  q = at::vec::fmadd(q, x2, VecF(-7.37332916720468e-03f));
  q = at::vec::fmadd(q, x2, VecF(-1.42647390514189e-02f));
  return xc * p / q;
}

template <typename T>
void silu(const void* x, void* y, int64_t n) {
  const VecF one(1.f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n,
           [&](const VecF& v) { return v / (one + exp_fast(v.neg())); });
}

template <typename T>
void gelu(const void* x, void* y, int64_t n) {  // F.gelu, exact erf form (ATen GeluKernel)
  const VecF alpha(static_cast<float>(M_SQRT1_2)), one(1.f), half(0.5f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n,
           [&](const VecF& v) { return v * half * (one + erf_fast(v * alpha)); });
}

template <typename T>
void gelu_tanh(const void* x, void* y, int64_t n) {  // F.gelu(approximate="tanh") (ATen GeluKernel)
  // 0.5 * x * (1 + tanh(u)) is x / (1 + exp(-2u)): one exp, and no cancellation for u << 0, so
  // it is closer to the exact value than eager's form (which rounds once, at the end, as here).
  const VecF minus_two_beta(static_cast<float>(-2 * M_SQRT2 * M_2_SQRTPI * 0.5)), kappa(0.044715f), one(1.f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF cube = v * v * v;
    return v / (one + exp_fast(minus_two_beta * (v + kappa * cube)));
  });
}

template <typename T>
void gelu_new(const void* x, void* y, int64_t n) {
  // 0.5 * x * (1.0 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3.0))))
  const VecF c(static_cast<float>(0.7978845608028654)), kappa(0.044715f), one(1.f), half(0.5f);
  if constexpr (std::is_same_v<T, float>) {
    kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n,
             [&](const VecF& v) { return x_sigmoid_2u(v, c * (v + kappa * (v * v * v))); });
    return;
  }
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF t1 = rnd<T>(half * v);
    // eager pow(x, 3.0) rounds x*x to bfloat16 before the last multiply, but not for float16
    VecF sq = std::is_same_v<T, c10::BFloat16> ? rnd<T>(v * v) : v * v;
    VecF cube = rnd<T>(sq * v);
    VecF inner = rnd<T>(c * rnd<T>(v + rnd<T>(kappa * cube)));
    return t1 * rnd<T>(one + tanh_as_eager<T>(inner));
  });
}

template <typename T>
void gelu_fast(const void* x, void* y, int64_t n) {
  // 0.5 * x * (1.0 + tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))
  const VecF c(0.7978845608f), kappa(0.044715f), one(1.f), half(0.5f);
  if constexpr (std::is_same_v<T, float>) {
    kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n,
             [&](const VecF& v) { return x_sigmoid_2u(v, v * c * (one + kappa * v * v)); });
    return;
  }
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF t1 = rnd<T>(half * v);
    VecF u = rnd<T>(v * c);
    VecF w = rnd<T>(one + rnd<T>(rnd<T>(kappa * v) * v));
    return t1 * rnd<T>(one + tanh_as_eager<T>(rnd<T>(u * w)));
  });
}

template <typename T>
void gelu_quick(const void* x, void* y, int64_t n) {
  // x * sigmoid(1.702 * x); sigmoid as ATen computes it: 1 / (exp(0 - a) + 1)
  const VecF k(1.702f), one(1.f), zero(0.f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF a = rnd<T>(k * v);
    VecF s = rnd<T>((exp_fast(zero - a) + one).reciprocal());
    return v * s;
  });
}

#if defined(CPU_CAPABILITY_AVX2)
// silu_and_mul in bfloat16 on AVX2: silu(a) rounded to bfloat16 is read from the unary silu's
// table (filled by this same code path's formula, so the bits are those of the formula below)
// with one gather per 8 lanes, instead of computed. Without native bfloat16 instructions the
// formula's exp, division and two roundings cost 0.71 ns per element on one Zen 4 core, against
// 0.41 for float32; the gather leaves a widening, a multiply and the final rounding.
inline VecF silu_from_table(const uint16_t* table, __m128i bits) {
  __m256i words = _mm256_i32gather_epi32(reinterpret_cast<const int*>(table), _mm256_cvtepu16_epi32(bits), 2);
  return VecF(_mm256_castsi256_ps(_mm256_slli_epi32(words, 16)));  // the entry's bits, widened
}

inline void silu_and_mul_bf16_lookup(const c10::BFloat16* in, c10::BFloat16* y, int64_t rows, int64_t d,
                                     int64_t in_stride, int64_t out_stride, const uint16_t* table) {
  const bool stream = kx::can_stream_rows(y, rows, d, out_stride);
  auto block = [&](const c10::BFloat16* a, const c10::BFloat16* b, c10::BFloat16* out, int64_t n) {
    VecF b0, b1;
    if (n == kx::kBlock) {
      __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a));
      kx::load2(b, b0, b1);
      VecF s0 = silu_from_table(table, _mm256_castsi256_si128(bits));
      VecF s1 = silu_from_table(table, _mm256_extracti128_si256(bits, 1));
      if (stream) {
        kx::stream2(out, s0 * b0, s1 * b1);
      } else {
        kx::store2(out, s0 * b0, s1 * b1);
      }
    } else {  // lanes past n read entry 0 and are not stored
      __m256i bits = __m256i(at::vec::Vectorized<c10::BFloat16>::loadu(a, n));
      kx::load2_tail(b, n, b0, b1);
      VecF s0 = silu_from_table(table, _mm256_castsi256_si128(bits));
      VecF s1 = silu_from_table(table, _mm256_extracti128_si256(bits, 1));
      kx::store2_tail(out, n, s0 * b0, s1 * b1);
    }
  };
  kx::for_each_row_range(rows, d, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const c10::BFloat16* a = in + r * in_stride;
      c10::BFloat16* out = y + r * out_stride;
      int64_t i = 0;
      for (; i + kx::kBlock <= d; i += kx::kBlock) block(a + i, a + d + i, out + i, kx::kBlock);
      if (i < d) block(a + i, a + d + i, out + i, d - i);
    }
    if (stream) kx::stream_fence();
  });
}
#endif

template <typename T>
void silu_and_mul(const void* x, void* y, int64_t rows, int64_t d, int64_t in_stride, int64_t out_stride,
                  [[maybe_unused]] const uint16_t* silu_table) {
  // silu(x[..., :d]) * x[..., d:]
  const T* in = static_cast<const T*>(x);
#if defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    if (silu_table) {
      silu_and_mul_bf16_lookup(in, static_cast<T*>(y), rows, d, in_stride, out_stride, silu_table);
      return;
    }
  }
#endif
  const VecF one(1.f);
  kx::map2_rows(in, in + d, in_stride, static_cast<T*>(y), out_stride, rows, d,
                [&](const VecF& a, const VecF& b) { return rnd<T>(a / (one + exp_fast(a.neg()))) * b; });
}

template <typename T>
void silu_and_mul_backward(const void* g_, int64_t g_stride, const void* x_, int64_t x_stride, void* dx_,
                           int64_t rows, int64_t d) {
  // y = to_T(silu(a)) * b. Eager autograd: mul's backward gives to_T(g * b) for the silu output and
  // to_T(g * silu) for b; silu_backward gives dy * s * (1 + a * (1 - s)) with s = sigmoid(a). Here
  // in one pass: read a, b and g once, write da and db once (eager: nine tensors, two zero-filled).
  const T* g = static_cast<const T*>(g_);
  const T* x = static_cast<const T*>(x_);
  T* dx = static_cast<T*>(dx_);
  const VecF one(1.f);
  auto pair = [&](const VecF& a, const VecF& b, const VecF& gg, VecF& da, VecF& db) {
    VecF s = one / (one + exp_fast(a.neg()));
    da = rnd<T>(gg * b) * s * (one + a * (one - s));
    db = gg * rnd<T>(a * s);
  };
  kx::for_each_row(rows, 3 * d, [&](int64_t r) {
    const T* ar = x + r * x_stride;
    const T* br = ar + d;
    const T* gr = g + r * g_stride;
    T* dar = dx + r * 2 * d;
    T* dbr = dar + d;
    VecF a0, a1, b0, b1, g0, g1, da0, da1, db0, db1;
    int64_t i = 0;
    for (; i + kx::kBlock <= d; i += kx::kBlock) {
      kx::load2(ar + i, a0, a1), kx::load2(br + i, b0, b1), kx::load2(gr + i, g0, g1);
      pair(a0, b0, g0, da0, db0), pair(a1, b1, g1, da1, db1);
      kx::store2(dar + i, da0, da1), kx::store2(dbr + i, db0, db1);
    }
    if (i < d) {
      int64_t n = d - i;
      kx::load2_tail(ar + i, n, a0, a1), kx::load2_tail(br + i, n, b0, b1), kx::load2_tail(gr + i, n, g0, g1);
      pair(a0, b0, g0, da0, db0), pair(a1, b1, g1, da1, db1);
      kx::store2_tail(dar + i, n, da0, da1), kx::store2_tail(dbr + i, n, db0, db1);
    }
  });
}

#define KX_BY_DTYPE(fn) {fn<float>, fn<c10::BFloat16>, fn<c10::Half>}

}  // namespace KX_ISA_NS

extern const kx::ActivationTable KX_CAT(kx_activation_table_, KX_ISA) = {
    {KX_BY_DTYPE(KX_ISA_NS::silu), KX_BY_DTYPE(KX_ISA_NS::gelu), KX_BY_DTYPE(KX_ISA_NS::gelu_tanh),
     KX_BY_DTYPE(KX_ISA_NS::gelu_new), KX_BY_DTYPE(KX_ISA_NS::gelu_fast), KX_BY_DTYPE(KX_ISA_NS::gelu_quick)},
    KX_BY_DTYPE(KX_ISA_NS::silu_and_mul),
    KX_BY_DTYPE(KX_ISA_NS::silu_and_mul_backward),
};
