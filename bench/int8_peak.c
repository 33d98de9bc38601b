/* The int8 dot-product peak of one core, for the quantized GEMM's paths (bench/quantized_linear.py
 * compiles and runs it): 12 independent accumulators, so that throughput and not latency bounds
 * the loop (6 with AVX2's 16 registers), of the very instruction sequence each path's inner loop runs per 4-byte group:
 *   vnni     vpdpbusd zmm                         (avx512bf16 path: 64 multiply-adds)
 *   maddubs  vpmaddubsw ymm + vpaddw ymm          (avx2 and avx512 paths, Q4_1: 32 multiply-adds)
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

__attribute__((target("avx2"))) static double maddubs(long iters) {
  /* 6 accumulators and 6 distinct signed operands (13 of AVX2's 16 registers), so that no
   * vpmaddubsw is common to two chains */
  enum { N = 6 };
  __m256i acc[N], b[N], a = _mm256_set1_epi8(3);
#pragma GCC unroll 16
  for (int i = 0; i < N; ++i) acc[i] = _mm256_set1_epi16((short)i), b[i] = _mm256_set1_epi8((char)(i + 1));
  double t0 = seconds();
  for (long n = 0; n < iters; ++n) {
    __asm__ volatile("" : "+x"(a));
#pragma GCC unroll 16
    for (int i = 0; i < N; ++i) acc[i] = _mm256_add_epi16(acc[i], _mm256_maddubs_epi16(a, b[i]));
  }
  double t = seconds() - t0;
  short out[16];
  int sink = 0;
  for (int i = 0; i < N; ++i) {
    _mm256_storeu_si256((__m256i*)out, acc[i]);
    sink += out[0];
  }
  if (sink == 42) puts("");
  return 2.0 * 32 * N * iters / t / 1e9;
}

int main(int argc, char** argv) {
  const int use_vnni = argc > 1 && strcmp(argv[1], "vnni") == 0;
  double best = 0;
  for (int round = 0; round < 7; ++round) { /* the best of 7: the peak, past a loaded machine's stalls */
    double g = use_vnni ? vnni(2000000) : maddubs(2000000);
    if (g > best) best = g;
  }
  printf("%.1f\n", best);
  return 0;
}
