// Where the quantized Linear's int8 GEMM spends its time, without torch: the activations'
// quantization and the GEMM (repack + tiles) of hub/quantized_linear/csrc/qlinear_int8.h timed apart
// on SmolLM2's shapes at 512 rows, one thread, CPU time, best of 15, for the avx2 unit's maddubs
// code or (-DVNNI) its AVX-VNNI variant. Prints GOP/s of the GEMM alone and with the quantization,
// to set against bench/int8_peak.c (maddubs, maddubs_q8, avxvnni).
//
//   g++ -O3 -std=c++17 -mavx2 -mfma -mf16c -ffp-contract=off -DCPU_CAPABILITY_AVX2
//       -Ihub/quantized_linear/csrc -o /tmp/phases bench/int8_gemm_phases.cpp && /tmp/phases
//   (add -mavxvnni -DVNNI for the AVX-VNNI variant)
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <vector>

#include "qlinear_format.h"

// what qlinear_isa.h gives the header in the kernel (there from c10::Half)
inline uint16_t half_bits(const uint8_t* p) {
  uint16_t b;
  std::memcpy(&b, p, 2);
  return b;
}
inline const float* half_table() {
  static const std::vector<float> t = [] {
    std::vector<float> v(65536);
    for (uint32_t i = 0; i < 65536; ++i) v[i] = _cvtsh_ss(static_cast<uint16_t>(i));
    return v;
  }();
  return t.data();
}
inline float half_at(const float* H, const uint8_t* p) { return H[half_bits(p)]; }

#if defined(VNNI)
#define KX_I8_VNNI 1
#define KX_I8_YMM 1
#endif
#include "qlinear_int8.h"

static double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

template <int F>
void run(const char* name, int K, int N, int M, int passes) {
  const int nb = K / 32, bytes = static_cast<int>(kx::block_bytes(F)), mb = M * nb;
  std::vector<uint8_t> w(size_t(N) * nb * bytes);
  srand(1);
  for (auto& v : w) v = static_cast<uint8_t>(rand());
  for (int i = 0; i < N * nb; ++i) {  // float16 scales (and mins) of a plausible size
    uint16_t h = 0x2000 + (rand() & 0x3ff);
    std::memcpy(&w[size_t(i) * bytes], &h, 2);
    h = 0xA000 + (rand() & 0x3ff);
    if (F == kx::kQ4_1) std::memcpy(&w[size_t(i) * bytes + 2], &h, 2);
  }
  std::vector<float> x(size_t(M) * K), y(size_t(M) * N), d(3 * mb);
  for (auto& v : x) v = rand() / float(RAND_MAX) * 2 - 1;
  std::vector<uint8_t> q(2 * size_t(M) * K);
  uint8_t* q2 = passes == 2 ? q.data() + size_t(M) * K : nullptr;
  double tq = 1e9, tg = 1e9;
  for (int rep = 0; rep < 15; ++rep) {
    const double t0 = cpu_seconds();
    i8::quant_acts<F>(x.data(), M, K, q.data(), d.data(), d.data() + mb, q2, d.data() + 2 * mb);
    const double t1 = cpu_seconds();
    i8::gemm<F>(w.data(), K, q.data(), d.data(), d.data() + mb, q2, d.data() + 2 * mb, M, nullptr, y.data(), N, 0, N);
    const double t2 = cpu_seconds();
    tq = std::min(tq, t1 - t0), tg = std::min(tg, t2 - t1);
  }
  const double ops = 2.0 * M * N * K * passes;
  printf("%-14s %s x%d  quantize %7.1f us  gemm %9.1f us  %4.0f GOP/s gemm, %4.0f with quantize\n", name,
         F == kx::kQ8_0 ? "q8_0" : "q4_1", passes, tq * 1e6, tg * 1e6, ops / tg / 1e9, ops / (tg + tq) / 1e9);
}

int main() {
  printf("int8 GEMM phases, %s, 512 rows, one thread, CPU time (best of 15)\n",
         i8::kVnni ? "AVX-VNNI (vpdpbusd ymm)" : "AVX2 (vpmaddubsw)");
  for (int passes = 1; passes <= 2; ++passes) {
    run<kx::kQ4_1>("q_proj,o_proj", 576, 576, 512, passes);
    run<kx::kQ4_1>("k_proj,v_proj", 576, 192, 512, passes);
    run<kx::kQ4_1>("gate,up_proj", 576, 1536, 512, passes);
    run<kx::kQ4_1>("down_proj", 1536, 576, 512, passes);
    run<kx::kQ8_0>("lm_head", 576, 49152, 512, passes);
  }
}
