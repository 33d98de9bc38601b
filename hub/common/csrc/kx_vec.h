// Shared vector helpers for the bundled CPU kernels.
//
// Each kernel source is compiled once per instruction set (AVX-512 with and without the BF16
// conversions, AVX2, portable) with CPU_CAPABILITY set the way ATen sets it, so
// `at::vec::Vectorized` picks the matching implementation, and every ISA's symbols live in their
// own namespace (KX_ISA_NS). The registration unit then dispatches at run time. exp is this
// file's fast version rather than Sleef's (see "Fast float32 math" below).
//
// Arithmetic is done in float32 and rounded to the storage type exactly where eager PyTorch
// stores an intermediate tensor (`rnd<T>`), which is what makes the results match eager.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include "kx_limits.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <tuple>
#include <type_traits>

#define KX_CAT_(a, b) a##b
#define KX_CAT(a, b) KX_CAT_(a, b)
#ifndef KX_ISA
#define KX_ISA portable
#endif
#define KX_ISA_NS KX_CAT(kx_isa_, KX_ISA)

namespace kx {
// Per-ISA inline namespace: the avx512 and avx512bf16 units share at::vec's types, so without it
// their differing inline helpers would have the same symbols and the linker could keep either.
inline namespace KX_ISA_NS {

using VecF = at::vec::Vectorized<float>;
constexpr int64_t kVecF = VecF::size();

// A growable scratch buffer of this code path's own (contents are not kept when it grows). Not
// std::vector: its members are instantiated once per shared object whichever unit asks, and the
// linker keeps one copy, so the avx512 unit's fill (zmm stores) ran on the avx2 path and an
// AVX2-only CPU died of SIGILL in the int8 GEMM. A template in this per-ISA namespace is
// instantiated per path; tests/hub/test_isa_symbols.py checks the built objects for the rest.
//
// The buffer starts on a cache line: `new T[n]` aligns to 16 bytes only, so where a heap happened
// to place it a kernel's every 64-byte load and store into it crossed two lines, and the same call
// took 15.5 us in one process and 18 us in the next (flash_attn's row path, 16 tokens).
template <typename T>
class Scratch {
 public:
  T* get(size_t n) {
    if (n > size_) {
      data_.reset(new T[n + kLine / sizeof(T)]);
      const auto at = reinterpret_cast<std::uintptr_t>(data_.get());
      aligned_ = reinterpret_cast<T*>((at + kLine - 1) / kLine * kLine);
      size_ = n;
    }
    return aligned_;
  }

 private:
  static constexpr std::uintptr_t kLine = 64;
  std::unique_ptr<T[]> data_;
  T* aligned_ = nullptr;
  size_t size_ = 0;
};
constexpr int64_t kBlock = 2 * kVecF;  // elements handled per step, for every dtype

// Storage dtype codes shared by the registration unit and the per-ISA units.
enum Dtype : int { kF32 = 0, kBF16 = 1, kF16 = 2 };

template <typename T>
inline void load2(const T* p, VecF& a, VecF& b) {
  if constexpr (std::is_same_v<T, float>) {
    a = VecF::loadu(p);
    b = VecF::loadu(p + kVecF);
  } else {
    std::tie(a, b) = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p));
  }
}

// Loads n < kBlock elements; lanes past n are zero.
template <typename T>
inline void load2_tail(const T* p, int64_t n, VecF& a, VecF& b) {
  if constexpr (std::is_same_v<T, float>) {
    a = VecF::loadu(p, std::min(n, kVecF));
    b = n > kVecF ? VecF::loadu(p + kVecF, n - kVecF) : VecF(0.f);
  } else {
    std::tie(a, b) = at::vec::convert_to_float<T>(at::vec::Vectorized<T>::loadu(p, n));
  }
}

#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
// 32 lanes to bfloat16 in one instruction (vcvtne2ps2bf16), except that it flushes float32
// subnormals to zero where eager's rounding keeps them: a vector holding one (below 1.2e-38,
// so rare) takes ATen's integer rounding instead.
constexpr int kSubnormal = 0x20;  // vfpclassps category

inline __m512i to_bf16(const VecF& a, const VecF& b) {
  if (_mm512_fpclass_ps_mask(a, kSubnormal) | _mm512_fpclass_ps_mask(b, kSubnormal))
    return __m512i(at::vec::convert_from_float<c10::BFloat16>(a, b));
  return (__m512i)_mm512_cvtne2ps_pbh(b, a);
}
#endif

template <typename T>
inline void store2(T* p, const VecF& a, const VecF& b) {
  if constexpr (std::is_same_v<T, float>) {
    a.store(p);
    b.store(p + kVecF);
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    _mm512_storeu_si512(p, to_bf16(a, b));
#endif
  } else {
    at::vec::convert_from_float<T>(a, b).store(p);
  }
}

template <typename T>
inline void store2_tail(T* p, int64_t n, const VecF& a, const VecF& b) {
  if constexpr (std::is_same_v<T, float>) {
    a.store(p, std::min(n, kVecF));
    if (n > kVecF) b.store(p + kVecF, n - kVecF);
#if defined(CPU_CAPABILITY_AVX512) && defined(__AVX512BF16__)
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    _mm512_mask_storeu_epi16(p, static_cast<__mmask32>((uint64_t{1} << n) - 1), to_bf16(a, b));
#endif
  } else {
    at::vec::convert_from_float<T>(a, b).store(p, n);
  }
}

// bfloat16 round-to-nearest-even without leaving float32 lanes: the same bits as ATen's
// conversion, without its pack and unpack shuffles. Every lane here holds a bfloat16 value or the
// float32 result of arithmetic on such values, so a NaN has a zero low half (inputs are widened
// bfloat16, arithmetic only quiets or propagates a payload) and the add cannot carry into its
// exponent: NaN stays NaN without the compare-and-blend a general float32 input would need.
#if defined(CPU_CAPABILITY_AVX512)
inline VecF rnd_bf16_int(const VecF& a) {
  __m512i bits = _mm512_castps_si512(a);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return VecF(_mm512_castsi512_ps(_mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xffff0000u)))));
}
#if defined(__AVX512BF16__)
// vcvtneps2bf16 rounds to nearest even (NaN stays NaN) in one instruction, but flushes float32
// subnormals to zero: a vector holding one takes the integer rounding.
inline VecF rnd_bf16(const VecF& a) {
  if (_mm512_fpclass_ps_mask(a, kSubnormal)) return rnd_bf16_int(a);
  __m256i h = (__m256i)_mm512_cvtneps_pbh(a);
  return VecF(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
}
#else
inline VecF rnd_bf16(const VecF& a) { return rnd_bf16_int(a); }
#endif
#elif defined(CPU_CAPABILITY_AVX2)
inline VecF rnd_bf16(const VecF& a) {
  __m256i bits = _mm256_castps_si256(a);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  return VecF(_mm256_castsi256_ps(_mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int>(0xffff0000u)))));
}
#endif

// Round a float32 vector to T and back: what storing an intermediate eager tensor of dtype T does.
template <typename T>
inline VecF rnd(const VecF& a) {
  if constexpr (std::is_same_v<T, float>) {
    return a;
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return rnd_bf16(a);
#endif
  } else {
    return std::get<0>(at::vec::convert_to_float<T>(at::vec::convert_from_float<T>(a, a)));
  }
}

// ---------------------------------------------------------------------------------------------
// Fast float32 math. Sleef's u10 functions (what at::vec calls) are accurate to 1 ulp but slow:
// tanhf alone costs about 100 cycles per AVX-512 vector, which is what makes eager GELU-tanh
// compute-bound. This exp is within ~2 ulp at a quarter of the cost; the tanh GELUs use it as
// x / (1 + exp(-2u)) (activation_isa.cpp).

// exp(r) for |r| <= ln2 / 2: Cephes' expf polynomial, shared by the ISA versions below.
inline VecF exp_reduced(const VecF& r) {
  VecF p(1.9875691500e-4f);
  p = at::vec::fmadd(p, r, VecF(1.3981999507e-3f));
  p = at::vec::fmadd(p, r, VecF(8.3334519073e-3f));
  p = at::vec::fmadd(p, r, VecF(4.1665795894e-2f));
  p = at::vec::fmadd(p, r, VecF(1.6666665459e-1f));
  p = at::vec::fmadd(p, r, VecF(5.0000001201e-1f));
  return at::vec::fmadd(p, r * r, r + VecF(1.f));
}

#if defined(CPU_CAPABILITY_AVX512)
// exp(x): Cephes' expf polynomial after a two-constant ln2 reduction; vscalefps applies 2^n with
// IEEE overflow to inf and gradual underflow, so no special cases are needed beyond the clamp.
inline VecF exp_fast(const VecF& x) {
  __m512 v = _mm512_max_ps(_mm512_set1_ps(-104.f), _mm512_min_ps(_mm512_set1_ps(89.f), x));  // NaN stays
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(v, _mm512_set1_ps(1.44269504088896341f)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), v);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  return VecF(_mm512_scalef_ps(exp_reduced(VecF(r)), n));
}
#elif defined(CPU_CAPABILITY_AVX2)
// The clamp keeps n in [-126, 128], so 2^n is one float built in its exponent field (n = 128 gives
// inf): three integer operations and a multiply where a two-factor scale with gradual underflow
// took nine. Below -87 exp is 0 (one compare and an and): the clamp alone gave 1.6e-38 there, and
// attention's masked keys (score -inf) then weighed 1.6e-38 instead of 0, so a causal row saw its
// future keys at that weight (a zero token's output read 4e-39, which a tiny random Apertus's
// RMSNorms amplified to 2e-3 of its logits). exp is inf from 88.38 rather than from 88.72, where it
// divides a number that would have to exceed 1e37 to tell. NaN passes the clamp (minps/maxps return
// their second operand), the compare (unordered: kept) and the polynomial; NaN times 2^n is NaN.
inline VecF exp_fast(const VecF& x) {
  __m256 v = _mm256_max_ps(_mm256_set1_ps(-87.f), _mm256_min_ps(_mm256_set1_ps(89.f), x));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(v, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), v);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  __m256 above = _mm256_cmp_ps(x, _mm256_set1_ps(-87.f), _CMP_NLT_UQ);  // x >= -87, or NaN
  return VecF(_mm256_and_ps(_mm256_mul_ps(exp_reduced(VecF(r)), _mm256_castsi256_ps(e)), above));
}
#else
inline VecF exp_fast(const VecF& x) { return x.exp(); }
#endif

// Stores one block at p, which must be 64-byte aligned, around the cache (used for outputs of
// kStreamFromBytes and more, see kx_limits.h). Call stream_fence() before the writing thread joins.
template <typename T>
inline void stream2(T* p, const VecF& a, const VecF& b) {
#if defined(CPU_CAPABILITY_AVX512)
  if constexpr (std::is_same_v<T, float>) {
    _mm512_stream_ps(p, a);
    _mm512_stream_ps(p + kVecF, b);
#if defined(__AVX512BF16__)
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), to_bf16(a, b));
#endif
  } else {
    _mm512_stream_si512(reinterpret_cast<__m512i*>(p), __m512i(at::vec::convert_from_float<T>(a, b)));
  }
#elif defined(CPU_CAPABILITY_AVX2)
  if constexpr (std::is_same_v<T, float>) {
    _mm256_stream_ps(p, a);
    _mm256_stream_ps(p + kVecF, b);
  } else {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), __m256i(at::vec::convert_from_float<T>(a, b)));
  }
#else
  store2(p, a, b);
#endif
}

constexpr bool kCanStream =
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
    true;
#else
    false;
#endif

// Streamed stores are weakly ordered: publish them before the join.
inline void stream_fence() {
#if defined(CPU_CAPABILITY_AVX512) || defined(CPU_CAPABILITY_AVX2)
  _mm_sfence();
#endif
}

// Whether rows of `cols` elements of T, written at y with row stride `stride`, can be streamed
// block by block: the output is large, and every row starts on a 64-byte line.
template <typename T>
inline bool can_stream_rows(const T* y, int64_t rows, int64_t cols, int64_t stride) {
  const int64_t bytes = rows * cols * static_cast<int64_t>(sizeof(T));
  return kCanStream && bytes >= kStreamFromBytes && reinterpret_cast<uintptr_t>(y) % 64 == 0 &&
         (stride * static_cast<int64_t>(sizeof(T))) % 64 == 0;
}

// Elementwise map over n contiguous elements: y = f(x). f works on float32 vectors.
template <typename T, typename F>
inline void map1(const T* x, T* y, int64_t n, const F& f) {
  const bool stream = kCanStream && n * static_cast<int64_t>(sizeof(T)) >= kStreamFromBytes &&
                      reinterpret_cast<uintptr_t>(y) % sizeof(T) == 0;
  auto body = [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    VecF a, b;
    if (stream) {
      // Normal stores up to the first 64-byte boundary, then whole blocks streamed.
      int64_t off = static_cast<int64_t>(reinterpret_cast<uintptr_t>(y + i) % 64) / sizeof(T);
      if (off) {
        int64_t peel = std::min<int64_t>(end - i, 64 / sizeof(T) - off);
        load2_tail(x + i, peel, a, b);
        store2_tail(y + i, peel, f(a), f(b));
        i += peel;
      }
      for (; i + kBlock <= end; i += kBlock) {
        load2(x + i, a, b);
        stream2(y + i, f(a), f(b));
      }
      stream_fence();
    }
    for (; i + kBlock <= end; i += kBlock) {
      load2(x + i, a, b);
      store2(y + i, f(a), f(b));
    }
    if (i < end) {
      load2_tail(x + i, end - i, a, b);
      store2_tail(y + i, end - i, f(a), f(b));
    }
  };
  if (n < kMapSerialBelow) {
    body(0, n);
  } else {
    at::parallel_for(0, n, kMapSerialBelow, body);
  }
}

// Calls range(begin, end) over [0, rows) rows of `cols` elements: once, on this thread, when the
// whole job is small, else split over torch's threads in chunks of about kSerialBelow elements.
template <typename F>
inline void for_each_row_range(int64_t rows, int64_t cols, const F& range) {
  if (rows * cols < kSerialBelow) {
    range(int64_t{0}, rows);
    return;
  }
  at::parallel_for(0, rows, std::max<int64_t>(1, kSerialBelow / std::max<int64_t>(cols, 1)), range);
}

// Calls row(r) for every row, split as for_each_row_range does.
template <typename F>
inline void for_each_row(int64_t rows, int64_t cols, const F& row) {
  for_each_row_range(rows, cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(r);
  });
}

// Elementwise map over two inputs: y = f(x0, x1); the three may have different row strides.
template <typename T, typename F>
inline void map2_rows(const T* x0, const T* x1, int64_t in_stride, T* y, int64_t out_stride, int64_t rows,
                      int64_t cols, const F& f) {
  // Large outputs bypass the cache, as in map1, when every row starts on a 64-byte line.
  const bool stream = can_stream_rows(y, rows, cols, out_stride);
  auto row = [&](int64_t r) {
    const T* a_row = x0 + r * in_stride;
    const T* b_row = x1 + r * in_stride;
    T* y_row = y + r * out_stride;
    int64_t i = 0;
    VecF a0, a1, b0, b1;
    if (stream) {
      for (; i + kBlock <= cols; i += kBlock) {
        load2(a_row + i, a0, a1);
        load2(b_row + i, b0, b1);
        stream2(y_row + i, f(a0, b0), f(a1, b1));
      }
    }
    for (; i + kBlock <= cols; i += kBlock) {
      load2(a_row + i, a0, a1);
      load2(b_row + i, b0, b1);
      store2(y_row + i, f(a0, b0), f(a1, b1));
    }
    if (i < cols) {
      load2_tail(a_row + i, cols - i, a0, a1);
      load2_tail(b_row + i, cols - i, b0, b1);
      store2_tail(y_row + i, cols - i, f(a0, b0), f(a1, b1));
    }
  };
  for_each_row_range(rows, cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) row(r);
    if (stream) stream_fence();
  });
}

}  // namespace KX_ISA_NS
}  // namespace kx
