/* The int8 dot-product peak of one core, for the quantized GEMM's paths (bench/quantized_linear.py
 * compiles and runs it): 12 independent accumulators, so that throughput and not latency bounds
 * the loop (6 or 8 with AVX2's 16 registers), of the very instruction sequence each path's inner
 * loop runs per 4-byte group:
 *   vnni        vpdpbusd zmm                      (avx512bf16 path: 64 multiply-adds)
 *   avxvnni     vpdpbusd ymm (AVX-VNNI)           (avx2 path where the CPU has it: 32)
 *   maddubs     vpmaddubsw ymm + vpaddw ymm       (avx2 and avx512 paths, Q4_1: 32 multiply-adds)
 *   maddubs_q8  vpsignb + vpmaddubsw + vpmaddwd + vpaddd ymm (the same paths, Q8_0: 32; two
 *               multiplies per group, so about half of maddubs)
 * Prints multiply-add pairs as GOP/s (2 ops each), one thread.
 *
 *   cc -O2 -o int8_peak bench/int8_peak.c && ./int8_peak vnni
 */
#include <immintrin.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define ACCS 12

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double vnni(long iters) {
  __m512i acc[ACCS], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(5);
#pragma GCC unroll 16
  for (int i = 0; i < ACCS; ++i) acc[i] = _mm512_set1_epi32(i);
  double t0 = seconds();
  for (long n = 0; n < iters; ++n) {
    __asm__ volatile("" : "+v"(a), "+v"(b));
#pragma GCC unroll 16
    for (int i = 0; i < ACCS; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
  }
  double t = seconds() - t0;
  int sink = 0;
  for (int i = 0; i < ACCS; ++i) sink += _mm512_reduce_add_epi32(acc[i]);
  if (sink == 42) puts("");
  return 2.0 * 64 * ACCS * iters / t / 1e9;
}

/* n accumulators and n distinct operands (1, 2, ...), so that no product is common to two chains */
__attribute__((target("avx2"))) static inline void ymm_start(__m256i* acc, __m256i* b, int n) {
  for (int i = 0; i < n; ++i) acc[i] = _mm256_set1_epi32(i), b[i] = _mm256_set1_epi8((char)(i + 1));
}

/* GOP/s of a loop over n ymm accumulators started at t0; reads them so that the loop is not dropped */
__attribute__((target("avx2"))) static double ymm_rate(const __m256i* acc, int n, double t0, long iters) {
  double t = seconds() - t0;
  int sink = 0;
  for (int i = 0; i < n; ++i) sink += _mm256_extract_epi32(acc[i], 0);
  if (sink == 42) puts("");
  return 2.0 * 32 * n * iters / t / 1e9;
}

__attribute__((target("avx2"))) static double maddubs(long iters) {
  /* 6 accumulators and 6 distinct signed operands (13 of AVX2's 16 registers), so that no
   * vpmaddubsw is common to two chains */
  enum { N = 6 };
  __m256i acc[N], b[N], a = _mm256_set1_epi8(3);
  ymm_start(acc, b, N);
  double t0 = seconds();
  for (long n = 0; n < iters; ++n) {
    __asm__ volatile("" : "+x"(a));
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(a, b[i]));
  }
  return ymm_rate(acc, N, t0, iters);
}

__attribute__((target("avx2,avxvnni"))) static double avxvnni(long iters) {
  /* 8 accumulators, 8 distinct unsigned operands: on Zen 5 the best of 4 to 14 accumulators
   * (6: 397 GOP/s, 8: 462, 12: 308, the same with the operands in memory) */
  enum { N = 8 };
  __m256i acc[N], b[N], a = _mm256_set1_epi8(3);
  ymm_start(acc, b, N);
  double t0 = seconds();
  for (long n = 0; n < iters; ++n) {
    __asm__ volatile("" : "+x"(a));
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) acc[i] = _mm256_dpbusd_avx_epi32(acc[i], a, b[i]);
  }
  return ymm_rate(acc, N, t0, iters);
}

__attribute__((target("avx2"))) static double maddubs_q8(long iters) {
  enum { N = 6 };
  __m256i acc[N], b[N], a = _mm256_set1_epi8(3), one = _mm256_set1_epi16(1);
  ymm_start(acc, b, N);
  double t0 = seconds();
  for (long n = 0; n < iters; ++n) {
    __asm__ volatile("" : "+x"(a));
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) {
      const __m256i p = _mm256_maddubs_epi16(b[i], _mm256_sign_epi8(a, b[i]));
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(p, one));
    }
  }
  return ymm_rate(acc, N, t0, iters);
}

int main(int argc, char** argv) {
  const char* kind = argc > 1 ? argv[1] : "maddubs";
  double (*run)(long) = strcmp(kind, "vnni") == 0       ? vnni
                        : strcmp(kind, "avxvnni") == 0  ? avxvnni
                        : strcmp(kind, "maddubs_q8") == 0 ? maddubs_q8
                                                          : maddubs;
  double best = 0;
  for (int round = 0; round < 7; ++round) { /* the best of 7: the peak, past a loaded machine's stalls */
    double g = run(2000000);
    if (g > best) best = g;
  }
  printf("%.1f\n", best);
  return 0;
}
