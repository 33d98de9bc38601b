// Activation kernels, compiled once per instruction set (see kx_vec.h).
//
// Each formula follows eager PyTorch operation by operation: ATen's own vectorized kernels for
// F.silu / F.gelu, and for the Python formulas of Transformers' NewGELU, FastGELU and QuickGELU a
// rounding to the storage dtype wherever eager materialises an intermediate tensor. One pass over
// memory replaces eager's five to nine.
#include "activation_table.h"
#include "kx_vec.h"

namespace KX_ISA_NS {
using kx::VecF;
using kx::rnd;

template <typename T>
void silu(const void* x, void* y, int64_t n) {
  const VecF one(1.f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n,
           [&](const VecF& v) { return v / (one + v.neg().exp()); });
}

template <typename T>
void gelu(const void* x, void* y, int64_t n) {  // F.gelu, exact erf form (ATen GeluKernel)
  const VecF alpha(static_cast<float>(M_SQRT1_2)), one(1.f), half(0.5f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n,
           [&](const VecF& v) { return v * half * (one + (v * alpha).erf()); });
}

template <typename T>
void gelu_tanh(const void* x, void* y, int64_t n) {  // F.gelu(approximate="tanh") (ATen GeluKernel)
  const VecF beta(static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5)), kappa(0.044715f), one(1.f), half(0.5f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF cube = v * v * v;
    VecF inner = beta * (v + kappa * cube);
    return half * v * (one + inner.tanh());
  });
}

template <typename T>
void gelu_new(const void* x, void* y, int64_t n) {
  // 0.5 * x * (1.0 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3.0))))
  const VecF c(static_cast<float>(0.7978845608028654)), kappa(0.044715f), one(1.f), half(0.5f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF t1 = rnd<T>(half * v);
    // eager pow(x, 3.0) rounds x*x to bfloat16 before the last multiply, but not for float16
    VecF sq = std::is_same_v<T, c10::BFloat16> ? rnd<T>(v * v) : v * v;
    VecF cube = rnd<T>(sq * v);
    VecF inner = rnd<T>(c * rnd<T>(v + rnd<T>(kappa * cube)));
    return t1 * rnd<T>(one + rnd<T>(inner.tanh()));
  });
}

template <typename T>
void gelu_fast(const void* x, void* y, int64_t n) {
  // 0.5 * x * (1.0 + tanh(x * 0.7978845608 * (1.0 + 0.044715 * x * x)))
  const VecF c(0.7978845608f), kappa(0.044715f), one(1.f), half(0.5f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF t1 = rnd<T>(half * v);
    VecF u = rnd<T>(v * c);
    VecF w = rnd<T>(one + rnd<T>(rnd<T>(kappa * v) * v));
    VecF t = rnd<T>(rnd<T>(u * w).tanh());
    return t1 * rnd<T>(one + t);
  });
}

template <typename T>
void gelu_quick(const void* x, void* y, int64_t n) {
  // x * sigmoid(1.702 * x); sigmoid as ATen computes it: 1 / (exp(0 - a) + 1)
  const VecF k(1.702f), one(1.f), zero(0.f);
  kx::map1(static_cast<const T*>(x), static_cast<T*>(y), n, [&](const VecF& v) {
    VecF a = rnd<T>(k * v);
    VecF s = rnd<T>(((zero - a).exp() + one).reciprocal());
    return v * s;
  });
}

template <typename T>
void silu_and_mul(const void* x, void* y, int64_t rows, int64_t d, int64_t in_stride, int64_t out_stride) {
  // silu(x[..., :d]) * x[..., d:]
  const VecF one(1.f);
  const T* in = static_cast<const T*>(x);
  kx::map2_rows(in, in + d, in_stride, static_cast<T*>(y), out_stride, rows, d,
                [&](const VecF& a, const VecF& b) { return rnd<T>(a / (one + a.neg().exp())) * b; });
}

#define KX_BY_DTYPE(fn) {fn<float>, fn<c10::BFloat16>, fn<c10::Half>}

}  // namespace KX_ISA_NS

extern const kx::ActivationTable KX_CAT(kx_activation_table_, KX_ISA) = {
    {KX_BY_DTYPE(KX_ISA_NS::silu), KX_BY_DTYPE(KX_ISA_NS::gelu), KX_BY_DTYPE(KX_ISA_NS::gelu_tanh),
     KX_BY_DTYPE(KX_ISA_NS::gelu_new), KX_BY_DTYPE(KX_ISA_NS::gelu_fast), KX_BY_DTYPE(KX_ISA_NS::gelu_quick)},
    KX_BY_DTYPE(KX_ISA_NS::silu_and_mul),
};
