// ggml's reference quantizers (quantize_row_q8_0_ref, quantize_row_q4_1_ref), formula for formula.
// On a weight that is already the dequantization of such blocks (a GGUF checkpoint loaded as
// float, as the default model is) they find the very same d, m and q again, so dequantizing the
// packed weight gives back every float bit for bit:
//   Q8_0: the block's largest |w| is 127 d exactly, so amax / 127 is d, and w / d is q.
//   Q4_1: the smallest w is m (q = 0), the largest is 15 d + m (q = 15), so (max - min) / 15
//         rounds to d in float16, and (w - min) / d is q within far less than the 0.5 that rounding
//         tolerates.
// tests/hub/test_quantized_linear.py checks it on every Linear of the default model.
#include "qlinear_pack.h"

#include "kx_limits.h"
#include "qlinear_format.h"

#include <ATen/Parallel.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kx {
namespace {

// A buffer for bytes that decode streams whole on every token (the GEMV layouts). From 2 MiB up
// it is 2 MiB-aligned and advised onto transparent huge pages (Linux's MADV_HUGEPAGE, before the
// first touch): on 4 KiB pages a GEMV walking 1 GB of weights takes a TLB miss, and the hardware
// prefetcher a stop, every 4 KiB. SmolLM2-1.7B's 168 decoder GEMVs ran 1.06-1.23x faster on huge
// pages on the Zen 4 host (docs/bundled-kernels.md). Advice only: where transparent huge pages are
// off ("never"), or none is free, the pages stay 4 KiB and the numbers the same. Smaller buffers,
// and other systems, take ATen's allocator; a last partial 2 MiB stays on 4 KiB pages. (PyTorch's
// own THP_MEM_ALLOC_ENABLE=1 does this for every large CPU tensor, set before the process starts.)
at::Tensor weight_buffer(at::IntArrayRef sizes) {
  const int64_t bytes = c10::multiply_integers(sizes);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr int64_t kHugePage = int64_t{2} << 20;
  if (bytes >= kHugePage) {
    // a fresh mapping (memory the allocator reuses is touched already: its pages stay small), one
    // huge page longer than the bytes so that they start 2 MiB-aligned (address space, not memory)
    const size_t length = static_cast<size_t>((bytes + kHugePage - 1) / kHugePage * kHugePage + kHugePage);
    void* base = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base != MAP_FAILED) {
      const uintptr_t at = (reinterpret_cast<uintptr_t>(base) + kHugePage - 1) / kHugePage * kHugePage;
      void* data = reinterpret_cast<void*>(at);
      // the whole huge pages only: a tail on one would take a full 2 MiB of memory (advice only)
      madvise(data, static_cast<size_t>(bytes / kHugePage * kHugePage), MADV_HUGEPAGE);
      return at::from_blob(
          data, sizes, [base, length](void*) { munmap(base, length); }, at::TensorOptions().dtype(at::kByte));
    }
  }
#endif
  return at::empty(sizes, at::TensorOptions().dtype(at::kByte));
}

inline void put_half(uint8_t* p, float v) {
  uint16_t bits = c10::Half(v).x;
  std::memcpy(p, &bits, 2);
}

void quantize_q8_0_block(const float* x, uint8_t* p) {
  float amax = 0.f;
  for (int64_t j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  put_half(p, d);
  for (int64_t j = 0; j < kQBlock; ++j) p[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(x[j] * id)));
}

void quantize_q4_1_block(const float* x, uint8_t* p) {
  float lo = x[0], hi = x[0];
  for (int64_t j = 1; j < kQBlock; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  const float d = (hi - lo) / 15.f;
  const float id = d != 0.f ? 1.f / d : 0.f;
  put_half(p, d);
  put_half(p + 2, lo);
  for (int64_t j = 0; j < 16; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - lo) * id + 0.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - lo) * id + 0.5f)));
    p[4 + j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
}

}  // namespace

at::Tensor quantize_weight(const at::Tensor& weight, int format, const char* op) {
  TORCH_CHECK(weight.device().is_cpu(), op, ": packs CPU weights only, got a weight on ", weight.device());
  TORCH_CHECK(weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16 ||
                  weight.scalar_type() == at::kHalf,
              op, ": packs float32, bfloat16 or float16 weights, got ", weight.scalar_type(),
              "; keep this layer on PyTorch");
  TORCH_CHECK(weight.dim() == 2, op, ": the weight must be 2-D (out_features, in_features), got shape ",
              weight.sizes());
  const int64_t N = weight.size(0), K = weight.size(1);
  TORCH_CHECK(K > 0 && K % kQBlock == 0, op, ": in_features must be a positive multiple of ", kQBlock,
              " (the block size), got ", K, "; keep this layer on PyTorch");
  at::Tensor w = weight.to(at::kFloat).contiguous();
  const int64_t nb = K / kQBlock, bytes = block_bytes(format);
  at::Tensor packed = at::empty({N, nb * bytes}, at::TensorOptions().dtype(at::kByte));
  const float* src = w.data_ptr<float>();
  uint8_t* dst = packed.data_ptr<uint8_t>();
  auto pack = format == kQ8_0 ? quantize_q8_0_block : quantize_q4_1_block;
  at::parallel_for(0, N * nb, std::max<int64_t>(1, kSerialBelow / kQBlock), [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) pack(src + i * kQBlock, dst + i * bytes);
  });
  return packed;
}

at::Tensor gemv_layout(const at::Tensor& packed, int format, const char* op) {
  const char* name = format == kQ8_0 ? "quantize_q8_0" : "quantize_q4_1";
  const int64_t bytes = block_bytes(format), group_bytes = group_block_bytes(format);
  TORCH_CHECK(packed.device().is_cpu() && packed.scalar_type() == at::kByte && packed.dim() == 2 &&
                  packed.is_contiguous() && packed.size(1) > 0 && packed.size(1) % bytes == 0,
              op, ": takes a contiguous 2-D uint8 CPU tensor from ", name, ", got ", packed.scalar_type(), " ",
              packed.sizes(), " on ", packed.device());
  const int64_t N = packed.size(0), nb = packed.size(1) / bytes;
  TORCH_CHECK(N % kGemvGroupRows == 0, op, ": the GEMV layout takes out_features in groups of ", kGemvGroupRows,
              ", got ", N, "; such a weight keeps GGML's layout (the row-major GEMVs)");
  at::Tensor out = weight_buffer(packed.sizes());
  const uint8_t* src = packed.data_ptr<uint8_t>();
  uint8_t* dst = out.data_ptr<uint8_t>();
  at::parallel_for(0, N / kGemvGroupRows, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* p = dst + (g * nb + b) * group_bytes;
        for (int64_t i = 0; i < kGemvGroupRows; ++i) {
          const uint8_t* block = src + ((g * kGemvGroupRows + i) * nb + b) * bytes;
          std::memcpy(p + 2 * i, block, 2);  // d
          if (format == kQ8_0) {
            for (int64_t c = 0; c < 8; ++c) std::memcpy(p + 32 + 64 * c + 4 * i, block + 2 + 4 * c, 4);
          } else {
            std::memcpy(p + 32 + 2 * i, block + 2, 2);  // m
            for (int64_t c = 0; c < 4; ++c) std::memcpy(p + 64 + 64 * c + 4 * i, block + 4 + 4 * c, 4);
          }
        }
      }
    }
  });
  return out;
}

}  // namespace kx
