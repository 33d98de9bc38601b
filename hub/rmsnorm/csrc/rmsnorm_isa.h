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
  // A large output bypasses the cache (see kx_vec.h) when every row starts on a 64-byte line.
  const bool stream = kx::can_stream_rows(y, rows, hidden, hidden);
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
      if (stream) {
        kx::stream2(yr + i, wa * kx::rnd<T>(a * scale), wb * kx::rnd<T>(b * scale));
      } else {
        kx::store2(yr + i, wa * kx::rnd<T>(a * scale), wb * kx::rnd<T>(b * scale));
      }
    }
    if (i < hidden) {
      int64_t n = hidden - i;
      kx::load2_tail(xr + i, n, a, b);
      kx::load2_tail(w + i, n, wa, wb);
      kx::store2_tail(yr + i, n, wa * kx::rnd<T>(a * scale), wb * kx::rnd<T>(b * scale));
    }
  };
  kx::for_each_row_range(rows, hidden, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(r);
    if (stream) kx::stream_fence();
  });
}

// The gradient of the forward above, as eager autograd computes it through LlamaRMSNorm's seven ops,
// in two passes over each row (the second one reads the row back from cache):
//   dn = to_T(g * w)                      the gradient reaching the normalised row, in T as eager
//   dx = to_T(rstd * dn - x * rstd^3 * sum(dn * x) / hidden)
//   dw += g * to_T(x * rstd)              per thread, summed by the caller
template <typename T, typename W>
void rmsnorm_backward(const void* g_, int64_t g_row_stride, const void* x_, int64_t x_row_stride, const void* w_,
                      void* dx_, float* dw, int64_t begin, int64_t end, int64_t hidden, float eps) {
  using G = std::conditional_t<std::is_same_v<T, W>, T, float>;
  const G* g = static_cast<const G*>(g_);
  const T* x = static_cast<const T*>(x_);
  const W* w = static_cast<const W*>(w_);
  T* dx = static_cast<T*>(dx_);
  auto sum = [](const VecF& v) {
    return at::vec::vec_reduce_all<float>([](VecF& p, VecF& q) { return p + q; }, v);
  };
  for (int64_t r = begin; r < end; ++r) {
    const T* xr = x + r * x_row_stride;
    const G* gr = g + r * g_row_stride;
    T* dxr = dx + r * hidden;
    VecF xa, xb, ga, gb, wa, wb, ss0(0.f), ss1(0.f), dot0(0.f), dot1(0.f);
    int64_t i = 0;
    auto accumulate = [&] {
      ss0 = ss0 + xa * xa, ss1 = ss1 + xb * xb;
      dot0 = dot0 + kx::rnd<T>(ga * wa) * xa, dot1 = dot1 + kx::rnd<T>(gb * wb) * xb;
    };
    for (; i + kx::kBlock <= hidden; i += kx::kBlock) {
      kx::load2(xr + i, xa, xb), kx::load2(gr + i, ga, gb), kx::load2(w + i, wa, wb);
      accumulate();
    }
    if (i < hidden) {
      int64_t n = hidden - i;
      kx::load2_tail(xr + i, n, xa, xb), kx::load2_tail(gr + i, n, ga, gb), kx::load2_tail(w + i, n, wa, wb);
      accumulate();
    }
    const float rstd = 1.f / std::sqrt(sum(ss0 + ss1) / static_cast<float>(hidden) + eps);
    const VecF scale(rstd), coef(-sum(dot0 + dot1) * rstd * rstd * rstd / static_cast<float>(hidden));
    auto grads = [&](int64_t at, int64_t n) {
      if (n == kx::kBlock) {
        kx::load2(xr + at, xa, xb), kx::load2(gr + at, ga, gb), kx::load2(w + at, wa, wb);
      } else {
        kx::load2_tail(xr + at, n, xa, xb), kx::load2_tail(gr + at, n, ga, gb), kx::load2_tail(w + at, n, wa, wb);
      }
      VecF da = scale * kx::rnd<T>(ga * wa) + xa * coef, db = scale * kx::rnd<T>(gb * wb) + xb * coef;
      if (n == kx::kBlock) {
        kx::store2(dxr + at, da, db);
      } else {
        kx::store2_tail(dxr + at, n, da, db);
      }
      if (dw) {
        VecF acc_a, acc_b;
        if (n == kx::kBlock) {
          kx::load2(dw + at, acc_a, acc_b);
          kx::store2(dw + at, acc_a + ga * kx::rnd<T>(xa * scale), acc_b + gb * kx::rnd<T>(xb * scale));
        } else {
          kx::load2_tail(dw + at, n, acc_a, acc_b);
          kx::store2_tail(dw + at, n, acc_a + ga * kx::rnd<T>(xa * scale), acc_b + gb * kx::rnd<T>(xb * scale));
        }
      }
    };
    for (i = 0; i + kx::kBlock <= hidden; i += kx::kBlock) grads(i, kx::kBlock);
    if (i < hidden) grads(i, hidden - i);
  }
}

}  // namespace KX_ISA_NS

#define KX_BY_WEIGHT(fn, T) {fn<T, float>, fn<T, c10::BFloat16>, fn<T, c10::Half>}
#define KX_BY_INPUT(fn) {KX_BY_WEIGHT(fn, float), KX_BY_WEIGHT(fn, c10::BFloat16), KX_BY_WEIGHT(fn, c10::Half)}

extern const kx::RmsNormTable KX_CAT(kx_rmsnorm_table_, KX_ISA) = {
    KX_BY_INPUT(KX_ISA_NS::rmsnorm),
    KX_BY_INPUT(KX_ISA_NS::rmsnorm_backward),
};
