// RMSNorm as Transformers' LlamaRMSNorm computes it, in two passes over each row instead of
// eager's seven kernels and four temporary tensors.
#include "kx_vec.h"
#include "rmsnorm_table.h"

#include <cmath>

namespace KX_ISA_NS {
using kx::VecF;

template <typename T, typename W>
void rmsnorm(const void* x_, int64_t x_row_stride, const void* w_, void* y_, int64_t rows, int64_t hidden,
             float eps) {
  using O = std::conditional_t<std::is_same_v<T, W>, T, float>;
  const T* x = static_cast<const T*>(x_);
  const W* w = static_cast<const W*>(w_);
  O* y = static_cast<O*>(y_);
  auto row = [&](int64_t r) {
    const T* xr = x + r * x_row_stride;
    O* yr = y + r * hidden;
    VecF a, b, acc0(0.f), acc1(0.f);
    int64_t i = 0;
    for (; i + kx::kBlock <= hidden; i += kx::kBlock) {
      kx::load2(xr + i, a, b);
      acc0 = acc0 + a * a;
      acc1 = acc1 + b * b;
    }
    if (i < hidden) {
      kx::load2_tail(xr + i, hidden - i, a, b);
      acc0 = acc0 + a * a;
      acc1 = acc1 + b * b;
    }
    float sum = at::vec::vec_reduce_all<float>([](VecF& p, VecF& q) { return p + q; }, acc0 + acc1);
    float variance = sum / static_cast<float>(hidden);
    const VecF scale(1.f / std::sqrt(variance + eps));
    VecF wa, wb;
    for (i = 0; i + kx::kBlock <= hidden; i += kx::kBlock) {
      kx::load2(xr + i, a, b);
      kx::load2(w + i, wa, wb);
      kx::store2(yr + i, wa * kx::rnd<T>(a * scale), wb * kx::rnd<T>(b * scale));
    }
    if (i < hidden) {
      int64_t n = hidden - i;
      kx::load2_tail(xr + i, n, a, b);
      kx::load2_tail(w + i, n, wa, wb);
      kx::store2_tail(yr + i, n, wa * kx::rnd<T>(a * scale), wb * kx::rnd<T>(b * scale));
    }
  };
  kx::for_each_row(rows, hidden, row);
}

}  // namespace KX_ISA_NS

#define KX_BY_WEIGHT(T) \
  {KX_ISA_NS::rmsnorm<T, float>, KX_ISA_NS::rmsnorm<T, c10::BFloat16>, KX_ISA_NS::rmsnorm<T, c10::Half>}

extern const kx::RmsNormTable KX_CAT(kx_rmsnorm_table_, KX_ISA) = {{
    KX_BY_WEIGHT(float),
    KX_BY_WEIGHT(c10::BFloat16),
    KX_BY_WEIGHT(c10::Half),
}};
