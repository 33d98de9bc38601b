// Rotary position embedding as Transformers' apply_rotary_pos_emb computes it
// (q * cos + rotate_half(q) * sin), in one pass per tensor instead of eager's six kernels.
#include "kx_vec.h"
#include "rotary_table.h"

namespace KX_ISA_NS {
using kx::rnd;
using kx::VecF;

template <typename T>
void rotary(const void* x_, const void* c_, const void* s_, void* y_, int64_t rows, int64_t d,
            const kx::RowIndex& index) {
  const T* x = static_cast<const T*>(x_);
  const T* c = static_cast<const T*>(c_);
  const T* s = static_cast<const T*>(s_);
  T* y = static_cast<T*>(y_);
  const int64_t h = d / 2;
  // Large outputs bypass the cache (see kx_vec.h); every block then starts on a 64-byte line.
  const bool stream = kx::kCanStream && rows * d * static_cast<int64_t>(sizeof(T)) >= kx::kStreamFromBytes &&
                      reinterpret_cast<uintptr_t>(y) % 64 == 0 && (h * sizeof(T)) % 64 == 0;
  auto rotate_row = [&](const T* xr, const T* cr, const T* sr, T* yr) {
    // rotate_half(x) = cat(-x2, x1): out1 = x1*c1 - x2*s1, out2 = x2*c2 + x1*s2, each product
    // and the sum rounded to T as eager stores them.
    auto step = [&](int64_t i, int64_t n) {
      VecF x1a, x1b, x2a, x2b, c1a, c1b, c2a, c2b, s1a, s1b, s2a, s2b;
      if (n == kx::kBlock) {
        kx::load2(xr + i, x1a, x1b), kx::load2(xr + h + i, x2a, x2b);
        kx::load2(cr + i, c1a, c1b), kx::load2(cr + h + i, c2a, c2b);
        kx::load2(sr + i, s1a, s1b), kx::load2(sr + h + i, s2a, s2b);
      } else {
        kx::load2_tail(xr + i, n, x1a, x1b), kx::load2_tail(xr + h + i, n, x2a, x2b);
        kx::load2_tail(cr + i, n, c1a, c1b), kx::load2_tail(cr + h + i, n, c2a, c2b);
        kx::load2_tail(sr + i, n, s1a, s1b), kx::load2_tail(sr + h + i, n, s2a, s2b);
      }
      VecF o1a = rnd<T>(x1a * c1a) + rnd<T>(x2a.neg() * s1a), o1b = rnd<T>(x1b * c1b) + rnd<T>(x2b.neg() * s1b);
      VecF o2a = rnd<T>(x2a * c2a) + rnd<T>(x1a * s2a), o2b = rnd<T>(x2b * c2b) + rnd<T>(x1b * s2b);
      if (n != kx::kBlock) {
        kx::store2_tail(yr + i, n, o1a, o1b), kx::store2_tail(yr + h + i, n, o2a, o2b);
      } else if (stream) {
        kx::stream2(yr + i, o1a, o1b), kx::stream2(yr + h + i, o2a, o2b);
      } else {
        kx::store2(yr + i, o1a, o1b), kx::store2(yr + h + i, o2a, o2b);
      }
    };
    int64_t i = 0;
    for (; i + kx::kBlock <= h; i += kx::kBlock) step(i, kx::kBlock);
    if (i < h) step(i, h - i);
  };
  // Each chunk of rows finds its first row's offsets by division, then steps the multi-index
  // like an odometer: no integer division per row (three of them cost as much as the row).
  kx::for_each_row_range(rows, d, [&](int64_t begin, int64_t end) {
    int64_t idx[kx::RowIndex::kMaxDims];
    int64_t off[3] = {0, 0, 0};
    int64_t rest = begin;
    for (int dim = index.dims - 1; dim >= 0; --dim) {
      idx[dim] = rest % index.sizes[dim];
      rest /= index.sizes[dim];
      for (int t = 0; t < 3; ++t) off[t] += idx[dim] * index.strides[t][dim];
    }
    for (int64_t r = begin; r < end; ++r) {
      rotate_row(x + off[0], c + off[1], s + off[2], y + r * d);
      for (int dim = index.dims - 1; dim >= 0; --dim) {
        for (int t = 0; t < 3; ++t) off[t] += index.strides[t][dim];
        if (++idx[dim] < index.sizes[dim]) break;
        for (int t = 0; t < 3; ++t) off[t] -= index.strides[t][dim] * index.sizes[dim];
        idx[dim] = 0;
      }
    }
    if (stream) kx::stream_fence();
  });
}

}  // namespace KX_ISA_NS

extern const kx::RotaryTable KX_CAT(kx_rotary_table_, KX_ISA) = {
    {KX_ISA_NS::rotary<float>, KX_ISA_NS::rotary<c10::BFloat16>, KX_ISA_NS::rotary<c10::Half>}};
