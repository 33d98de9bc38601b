// Shared vector helpers for the bundled CPU kernels.
//
// Each kernel source is compiled once per instruction set (AVX-512, AVX2, portable) with
// CPU_CAPABILITY set the way ATen sets it, so `at::vec::Vectorized` picks the matching
// implementation (Sleef exp/tanh, the same ones eager PyTorch calls) and every ISA's symbols live
// in their own namespace (KX_ISA_NS). The registration unit then dispatches at run time.
//
// Arithmetic is done in float32 and rounded to the storage type exactly where eager PyTorch
// stores an intermediate tensor (`rnd<T>`), which is what makes the results match eager.
#pragma once

#include <ATen/Parallel.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <tuple>
#include <type_traits>

#define KX_CAT_(a, b) a##b
#define KX_CAT(a, b) KX_CAT_(a, b)
#ifndef KX_ISA
#define KX_ISA portable
#endif
#define KX_ISA_NS KX_CAT(kx_isa_, KX_ISA)

namespace kx {

using VecF = at::vec::Vectorized<float>;
constexpr int64_t kVecF = VecF::size();
constexpr int64_t kBlock = 2 * kVecF;  // elements handled per step, for every dtype
// Below this many elements an op runs on the calling thread: waking the pool costs more.
constexpr int64_t kSerialBelow = 16384;

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

template <typename T>
inline void store2(T* p, const VecF& a, const VecF& b) {
  if constexpr (std::is_same_v<T, float>) {
    a.store(p);
    b.store(p + kVecF);
  } else {
    at::vec::convert_from_float<T>(a, b).store(p);
  }
}

template <typename T>
inline void store2_tail(T* p, int64_t n, const VecF& a, const VecF& b) {
  if constexpr (std::is_same_v<T, float>) {
    a.store(p, std::min(n, kVecF));
    if (n > kVecF) b.store(p + kVecF, n - kVecF);
  } else {
    at::vec::convert_from_float<T>(a, b).store(p, n);
  }
}

// bfloat16 round-to-nearest-even without leaving float32 lanes (NaN stays a quiet NaN): the same
// bits as ATen's conversion, without its pack and unpack shuffles.
#if defined(CPU_CAPABILITY_AVX512)
inline VecF rnd_bf16(const VecF& a) {
  __m512 v = a;
  __m512i bits = _mm512_castps_si512(v);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  rounded = _mm512_and_si512(rounded, _mm512_set1_epi32(static_cast<int>(0xffff0000u)));
  __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
  rounded = _mm512_mask_mov_epi32(rounded, nan, _mm512_set1_epi32(0x7fc00000));
  return VecF(_mm512_castsi512_ps(rounded));
}
#elif defined(CPU_CAPABILITY_AVX2)
inline VecF rnd_bf16(const VecF& a) {
  __m256 v = a;
  __m256i bits = _mm256_castps_si256(v);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  rounded = _mm256_and_si256(rounded, _mm256_set1_epi32(static_cast<int>(0xffff0000u)));
  __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
  return VecF(_mm256_blendv_ps(_mm256_castsi256_ps(rounded), _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN()), nan));
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

// Elementwise map over n contiguous elements: y = f(x). f works on float32 vectors.
template <typename T, typename F>
inline void map1(const T* x, T* y, int64_t n, const F& f) {
  auto body = [&](int64_t begin, int64_t end) {
    int64_t i = begin;
    VecF a, b;
    for (; i + kBlock <= end; i += kBlock) {
      load2(x + i, a, b);
      store2(y + i, f(a), f(b));
    }
    if (i < end) {
      load2_tail(x + i, end - i, a, b);
      store2_tail(y + i, end - i, f(a), f(b));
    }
  };
  if (n < kSerialBelow) {
    body(0, n);
  } else {
    at::parallel_for(0, n, kSerialBelow, body);
  }
}

// Calls row(r) for every row of `cols` elements: on this thread when the whole job is small,
// else split over torch's threads in chunks of about kSerialBelow elements.
template <typename F>
inline void for_each_row(int64_t rows, int64_t cols, const F& row) {
  if (rows * cols < kSerialBelow) {
    for (int64_t r = 0; r < rows; ++r) row(r);
    return;
  }
  at::parallel_for(0, rows, std::max<int64_t>(1, kSerialBelow / std::max<int64_t>(cols, 1)),
                   [&](int64_t begin, int64_t end) {
                     for (int64_t r = begin; r < end; ++r) row(r);
                   });
}

// Elementwise map over two inputs: y = f(x0, x1); the three may have different row strides.
template <typename T, typename F>
inline void map2_rows(const T* x0, const T* x1, int64_t in_stride, T* y, int64_t out_stride, int64_t rows,
                      int64_t cols, const F& f) {
  auto row = [&](int64_t r) {
    const T* a_row = x0 + r * in_stride;
    const T* b_row = x1 + r * in_stride;
    T* y_row = y + r * out_stride;
    int64_t i = 0;
    VecF a0, a1, b0, b1;
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
  for_each_row(rows, cols, row);
}

}  // namespace kx
