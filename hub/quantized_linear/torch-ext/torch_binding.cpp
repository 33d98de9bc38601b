// Registers the quantized linear ops under the kernel's metadata id (every op of this repository
// is registered here) and runs them: packing (qlinear_pack.cpp), the GEMV path for a few rows of
// activations (float, or int8 on the GEMV layout) and, for many, the int8 GEMM (qlinear_int8.h:
// int8_passes 2 or 1; -1, the default, takes 2 for float32 activations and 1 for 16-bit ones) or,
// with int8_passes=0, dequantized panels multiplied by ATen's matmul (PyTorch's numbers); all on the
// ISA table chosen at run time.
#include "registration.h"

#include "kx_dispatch.h"
#include "kx_limits.h"
#include "qlinear_format.h"
#include "qlinear_pack.h"
#include "qlinear_table.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

KX_ISA_TABLE(kx::QLinearTable, kx_qlinear_table)

namespace {
using kx::kQBlock;

// Up to this many rows of activations take the GEMV path: each pass of kGemvRows rows streams the
// packed weight once, which beats dequantizing it for a matmul until the matmul's work dominates.
constexpr int64_t kGemvMaxRows = 8;
// The GEMM path dequantizes this many bytes of float32 weight rows at a time (a panel that stays
// in L2/L3 while the matmul reads it; larger panels make fewer, more efficient matmul calls) and
// multiplies them with ATen's matmul.
constexpr int64_t kPanelBytes = int64_t{4} << 20;

const char* format_name(int format) { return format == kx::kQ8_0 ? "q8_0" : "q4_1"; }

// (out_features, in_features) of a packed weight, after checking it is one.
std::pair<int64_t, int64_t> packed_shape(const at::Tensor& packed, int format, const char* op) {
  TORCH_CHECK(packed.device().is_cpu() && packed.scalar_type() == at::kByte && packed.dim() == 2 &&
                  packed.is_contiguous(),
              op, ": the packed weight must be a contiguous 2-D uint8 CPU tensor from quantize_",
              format_name(format), ", got ", packed.scalar_type(), " ", packed.sizes(), " on ", packed.device());
  const int64_t bytes = kx::block_bytes(format);
  TORCH_CHECK(packed.size(1) > 0 && packed.size(1) % bytes == 0, op, ": a ", format_name(format),
              " packed row holds whole blocks of ", bytes, " bytes, got rows of ", packed.size(1),
              " bytes; pack the weight with quantize_", format_name(format));
  return {packed.size(0), packed.size(1) / bytes * kQBlock};
}

// Whether the int8 GEMM may take a path's VNNI variant (the avx2 path's AVX-VNNI, the avx512
// path's AVX512-VNNI) where the CPU has it; false runs AVX2's vpmaddubsw code instead, so that a
// VNNI machine tests and measures both. KERNEL_EXPLORER_NO_VNNI=1 starts a process with false.
std::atomic<bool> allow_vnni{std::getenv("KERNEL_EXPLORER_NO_VNNI") == nullptr};

// The int8 GEMM's dot-product instruction on the current path: vpdpbusd-zmm (AVX512-VNNI),
// vpdpbusd-ymm (AVX-VNNI), vpmaddubsw (AVX2) or scalar (portable).
std::string int8_dot() { return table().int8_dot(allow_vnni.load()); }

// "maddubs": the AVX2 vpmaddubsw code even where the path has a VNNI variant the CPU runs (the
// avx512bf16 path has no such code and keeps VNNI); "auto": VNNI where the CPU has it. Returns
// int8_dot() afterwards.
std::string set_int8_dot(const std::string& kind) {
  TORCH_CHECK(kind == "auto" || kind == "maddubs", "set_int8_dot: expected 'auto' (VNNI where the CPU has it) ",
              "or 'maddubs' (AVX2's vpmaddubsw), got '", kind, "'");
  allow_vnni = kind == "auto";
  return int8_dot();
}

at::Tensor quantize_q8_0(const at::Tensor& weight) { return kx::quantize_weight(weight, kx::kQ8_0, "quantize_q8_0"); }
at::Tensor quantize_q4_1(const at::Tensor& weight) { return kx::quantize_weight(weight, kx::kQ4_1, "quantize_q4_1"); }

// Rows [begin, end) of the packed weight to float32, split over threads when large.
void dequant_rows(int format, const uint8_t* w, int64_t K, float* out, int64_t begin, int64_t end) {
  const int64_t grain = std::max<int64_t>(1, kx::kSerialBelow / K);
  if ((end - begin) * K < kx::kSerialBelow) return table().dequant[format](w, K, out, begin, end);
  at::parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    table().dequant[format](w, K, out + (b - begin) * K, b, e);
  });
}

at::Tensor dequantize(const at::Tensor& packed, int format, const char* op) {
  auto [N, K] = packed_shape(packed, format, op);
  at::Tensor out = at::empty({N, K}, at::TensorOptions().dtype(at::kFloat));
  if (N > 0) dequant_rows(format, packed.data_ptr<uint8_t>(), K, out.data_ptr<float>(), 0, N);
  return out;
}

at::Tensor dequantize_q8_0(const at::Tensor& packed) { return dequantize(packed, kx::kQ8_0, "dequantize_q8_0"); }
at::Tensor dequantize_q4_1(const at::Tensor& packed) { return dequantize(packed, kx::kQ4_1, "dequantize_q4_1"); }

// y (M, N) float32 = x (M, K) float32 @ W^T + bias, GEMV passes of up to kGemvRows rows.
void gemv_path(int format, const uint8_t* w, const at::Tensor& x, const float* bias, at::Tensor& y, int64_t N) {
  const int64_t M = x.size(0), K = x.size(1);
  const float* xp = x.data_ptr<float>();
  const int64_t nb = K / kQBlock;
  std::vector<float> sums;
  if (format == kx::kQ4_1) {  // per row and block: the sum of x over the block, which its min multiplies
    sums.resize(static_cast<size_t>(M * nb));
    for (int64_t i = 0; i < M * nb; ++i) {
      float s = 0.f;
      for (int64_t j = 0; j < kQBlock; ++j) s += xp[i * kQBlock + j];
      sums[i] = s;
    }
  }
  float* yp = y.data_ptr<float>();
  const auto fn = table().gemv[format];
  const int64_t grain = std::max<int64_t>(1, kx::kSerialBelow / K);
  for (int64_t r0 = 0; r0 < M; r0 += kx::kGemvRows) {
    const int64_t rows = std::min(kx::kGemvRows, M - r0);
    const float* xr = xp + r0 * K;
    const float* pr = sums.empty() ? nullptr : sums.data() + r0 * nb;
    float* yr = yp + r0 * N;
    if (N * K < kx::kSerialBelow) {
      fn(w, xr, pr, rows, K, bias, yr, N, 0, N);
    } else {
      at::parallel_for(0, N, grain, [&](int64_t b, int64_t e) { fn(w, xr, pr, rows, K, bias, yr, N, b, e); });
    }
  }
}

// A growable buffer of the calling thread's own (its contents are not kept when it grows). A
// template of this unit's anonymous namespace, plain new[]: not std::vector, whose members the
// per-ISA units instantiate too (see kx::Scratch in kx_vec.h).
template <typename T>
T* thread_scratch(size_t n) {
  thread_local std::unique_ptr<T[]> data;
  thread_local size_t size = 0;
  if (n > size) {
    data.reset(new T[n]);
    size = n;
  }
  return data.get();
}

// One weight of an int8 GEMV call: its packed blocks, the same in the GEMV layout (or null),
// its float32 bias (or null) and where its (M, N) float32 output goes.
struct GemvTarget {
  const uint8_t* w;
  const uint8_t* grouped;
  const float* bias;
  float* y;
  int64_t N;
};

// y = x (M, K) float32 @ W^T + bias for every target, on the int8 GEMV (qlinear_gemv_i8.h): the rows
// of x quantized once (with `passes` 2, their residual too), then passes of up to kGemvRows rows
// each stream the packed weights once, threads taking runs of output features.
//
// Targets in the GEMV layout (qlinear_gemv_x16.h) take the same activations 16 output rows at
// a time, threads taking runs of those groups across all the targets: one parallel region for
// several weights on one input (linear_q4_1_many: a layer's q, k and v, or gate and up), where one
// call each woke the pool and joined it again per weight. Each output is the same, bitwise, as the
// weight's own call gives (the same activations, groups and order of sums). Several targets must
// all be in the GEMV layout; one row-major target is split by output features.
void gemv_i8_path(int format, int64_t passes, const at::Tensor& x, const std::vector<GemvTarget>& targets) {
  const int64_t M = x.size(0), K = x.size(1), nb = K / kQBlock;
  const bool two = passes >= 2;
  // the calling thread's scratch, not two at::empty per call (~0.3 ms of a SmolLM2 token's 210)
  int8_t* qp = thread_scratch<int8_t>(static_cast<size_t>((two ? 2 : 1) * M * K));
  int8_t* q2p = two ? qp + M * K : nullptr;
  float* sp = thread_scratch<float>(static_cast<size_t>(M * nb * kx::kGemvI8Scales));
  table().gemv_i8_acts(x.data_ptr<float>(), M, K, two, qp, q2p, sp);
  const int64_t grain = std::max<int64_t>(1, kx::kSerialBelow / K);
  int64_t groups = 0, outputs = 0;
  for (const GemvTarget& t : targets) {
    groups += t.grouped != nullptr ? t.N / kx::kGemvGroupRows : 0;
    outputs += t.N;
  }
  const bool serial = outputs * K < kx::kSerialBelow;
  for (int64_t r0 = 0; r0 < M; r0 += kx::kGemvRows) {
    const int64_t rows = std::min(kx::kGemvRows, M - r0);
    const int8_t* q1r = qp + r0 * K;
    const int8_t* q2r = two ? q2p + r0 * K : nullptr;
    const float* sr = sp + r0 * nb * kx::kGemvI8Scales;
    if (targets.front().grouped == nullptr) {
      const GemvTarget& t = targets.front();
      const auto fn = table().gemv_i8[format];
      float* yr = t.y + r0 * t.N;
      if (serial) {
        fn(t.w, q1r, q2r, sr, rows, K, t.bias, yr, t.N, 0, t.N);
      } else {
        at::parallel_for(0, t.N, grain, [&](int64_t b, int64_t e) { fn(t.w, q1r, q2r, sr, rows, K, t.bias, yr, t.N, b, e); });
      }
      continue;
    }
    // groups [b, e) of the targets laid end to end: each target's share of them, in its own numbering
    const auto run = [&](int64_t b, int64_t e) {
      int64_t first = 0;
      for (const GemvTarget& t : targets) {
        const int64_t count = t.N / kx::kGemvGroupRows, lo = std::max(b, first), hi = std::min(e, first + count);
        if (lo < hi) {
          table().gemv_x16[format](t.grouped, q1r, q2r, sr, rows, K, t.bias, t.y + r0 * t.N, t.N, lo - first, hi - first);
        }
        first += count;
      }
    };
    if (serial) {
      run(0, groups);
    } else {
      at::parallel_for(0, groups, std::max<int64_t>(1, grain / kx::kGemvGroupRows), run);
    }
  }
}

// y (M, N) float32 = x @ W^T + bias: panels of weight rows dequantized to float32, each multiplied
// by ATen's matmul straight into y's columns. Threads take whole panels (their matmuls run on the
// one thread, as nested parallel regions do), so a call joins its threads once: on a shared machine
// every join can wait a scheduler slice for a preempted worker, and a join per panel made the
// 49152-row lm_head 4x slower than PyTorch. Panels are at most kPanelBytes, and with several
// threads at least two per thread, so that the threads finish together.
void gemm_path(int format, const uint8_t* w, const at::Tensor& x, const at::Tensor& bias, at::Tensor& y, int64_t N) {
  const int64_t K = x.size(1);
  const int64_t threads = at::get_num_threads();
  const int64_t by_bytes = std::max<int64_t>(16, kPanelBytes / (K * 4));
  const int64_t by_threads = threads > 1 ? (N + 2 * threads - 1) / (2 * threads) : N;
  const int64_t panel_rows = std::max<int64_t>(16, (std::min(by_bytes, by_threads) + 15) / 16 * 16);
  const int64_t panels = (N + panel_rows - 1) / panel_rows;
  // The workers run ATen ops: they take this thread's state (inference mode, the dispatch keys
  // excluded below autograd), or writing y, an inference tensor under inference mode, would fail.
  const at::ThreadLocalState state;
  at::parallel_for(0, panels, 1, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard guard(state);
    at::Tensor panel = at::empty({panel_rows, K}, x.options().dtype(at::kFloat));
    for (int64_t p = begin; p < end; ++p) {
      const int64_t n0 = p * panel_rows, n = std::min(panel_rows, N - n0);
      table().dequant[format](w, K, panel.data_ptr<float>(), n0, n0 + n);
      at::Tensor cols = y.narrow(1, n0, n);
      at::Tensor wt = panel.narrow(0, 0, n);
      if (x.scalar_type() != at::kFloat) wt = wt.to(x.scalar_type());  // bfloat16: ATen's bf16 GEMM
      wt = wt.t();
      if (bias.defined()) {
        at::addmm_out(cols, bias.narrow(0, n0, n), x, wt);
      } else {
        at::mm_out(cols, x, wt);
      }
    }
  });
}

// y (M, N) float32 = x @ W^T + bias on the int8 path (qlinear_int8.h): the rows of x quantized per
// block of 32 (split over threads by rows), then threads take contiguous runs of output columns.
// With two passes the residual x - d q is quantized too, and its products added in the same sweep
// over the weights: x ~ d q + d_r q_r, whose error is about 1/254 of one pass's.
void int8_gemm_path(int format, int64_t passes, const uint8_t* w, const at::Tensor& x, const float* bias,
                    at::Tensor& y, int64_t N) {
  const int64_t M = x.size(0), K = x.size(1), nb = K / kQBlock;
  const bool two = passes >= 2;
  at::Tensor q = at::empty({two ? 2 : 1, M, K}, at::TensorOptions().dtype(at::kByte));
  at::Tensor d = at::empty({3, M, nb}, at::TensorOptions().dtype(at::kFloat));  // d, s, d_r
  const float* xp = x.data_ptr<float>();
  uint8_t* qp = q.data_ptr<uint8_t>();
  float* dp = d.data_ptr<float>();
  const int64_t mk = M * K, mb = M * nb;
  const auto quant = table().quant_acts[format];
  const bool vnni = allow_vnni.load();  // one variant for the activations and the GEMM
  at::parallel_for(0, M, std::max<int64_t>(1, kx::kSerialBelow / K), [&](int64_t b, int64_t e) {
    quant(xp + b * K, e - b, K, qp + b * K, dp + b * nb, dp + mb + b * nb, two ? qp + mk + b * K : nullptr,
          dp + 2 * mb + b * nb, vnni);
  });
  const auto gemm = table().gemm_i8[format];
  float* yp = y.data_ptr<float>();
  constexpr int64_t kUnit = 32;  // columns: a multiple of every path's tile width
  const int64_t units = (N + kUnit - 1) / kUnit;
  at::parallel_for(0, units, 1, [&](int64_t b, int64_t e) {
    gemm(w, K, qp, dp, dp + mb, two ? qp + mk : nullptr, dp + 2 * mb, M, bias, yp, N, b * kUnit,
         std::min(N, e * kUnit), vnni);
  });
}

// One packed weight of a linear call, checked against the input `x`: its shape, its GEMV layout
// (null without one) and its bias as float32 (undefined without one).
struct LinearWeight {
  int64_t N, K;
  const uint8_t* w;
  const uint8_t* grouped;
  at::Tensor bias;
};

LinearWeight checked_weight(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                            int format, const std::optional<at::Tensor>& gemv, const char* op) {
  auto [N, K] = packed_shape(packed, format, op);
  const uint8_t* grouped = nullptr;
  if (gemv.has_value() && gemv->defined()) {
    TORCH_CHECK(gemv->device().is_cpu() && gemv->scalar_type() == at::kByte && gemv->is_contiguous() &&
                    gemv->sizes() == packed.sizes() && N % kx::kGemvGroupRows == 0,
                op, ": gemv must be gemv_layout_", format_name(format), " of the packed weight (", packed.sizes(),
                "), got ", gemv->scalar_type(), " ", gemv->sizes());
    grouped = gemv->data_ptr<uint8_t>();
  }
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == K, op, ": the input's last dimension (", x.dim() ? x.size(-1) : 0,
              ") must be in_features of the packed weight (", K, ")");
  at::Tensor b;
  if (bias.has_value() && bias->defined()) {
    kx::dtype_code(*bias, op);
    TORCH_CHECK(bias->dim() == 1 && bias->size(0) == N, op, ": bias of shape ", bias->sizes(),
                " does not match out_features ", N);
    b = bias->to(at::kFloat).contiguous();
  }
  return {N, K, packed.data_ptr<uint8_t>(), grouped, b};
}

// The int8 passes a call runs with: `int8_passes` itself, or for -1 the default.
// 16-bit activations carry 8 (bfloat16) or 11 bits already: one int8 pass's error is of their own
// rounding's order, and a second would lose to the 16-bit GEMMs F.linear runs. Up to kGemvMaxRows
// on GGML's row-major blocks the float GEMV: the int8 GEMV with two passes was no faster there
// (bench/decode_gemvs.py); on the GEMV layout two passes were 1.4-1.9x the float GEMV on every
// path and host measured, with its accuracy (the residual pass: ~250 times less error than one).
int64_t resolved_passes(int64_t int8_passes, int64_t M, bool grouped, const at::Tensor& x, const char* op) {
  TORCH_CHECK(int8_passes >= -1 && int8_passes <= 2, op, ": int8_passes must be 0 (dequantize and matmul), ",
              "1 (int8 activations), 2 (int8 activations and their int8 residual) or -1 (2 for float32 ",
              "activations, 1 for 16-bit ones; up to 8 rows without the GEMV layout, the float GEMV), got ",
              int8_passes);
  if (int8_passes >= 0) return int8_passes;
  return M <= kGemvMaxRows && !grouped ? 0 : x.scalar_type() == at::kFloat ? 2 : 1;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias, int format,
                  int64_t int8_passes, const std::optional<at::Tensor>& gemv, const char* op) {
  kx::dtype_code(x, op);
  const LinearWeight lw = checked_weight(x, packed, bias, format, gemv, op);
  const int64_t N = lw.N, K = lw.K;
  const at::Tensor& b = lw.bias;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = N;
  at::Tensor out = at::empty(shape, x.options());
  const int64_t M = x.numel() / K;
  int8_passes = resolved_passes(int8_passes, M, lw.grouped != nullptr, x, op);
  if (M == 0 || N == 0) return out;
  const uint8_t* w = lw.w;
  if (int8_passes > 0) {
    at::Tensor xf = x.reshape({M, K}).to(at::kFloat).contiguous();
    at::Tensor y = x.scalar_type() == at::kFloat ? out.view({M, N}) : at::empty({M, N}, xf.options());
    const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
    if (M <= kGemvMaxRows) {
      gemv_i8_path(format, int8_passes, xf, {{w, lw.grouped, bp, y.data_ptr<float>(), N}});
    } else {
      int8_gemm_path(format, int8_passes, w, xf, bp, y, N);
    }
    if (x.scalar_type() != at::kFloat) out.view({M, N}).copy_(y);
    return out;
  }
  if (M > kGemvMaxRows && x.scalar_type() == at::kBFloat16) {
    // bfloat16 activations take ATen's bfloat16 GEMM (float32 accumulation) on the panels rounded
    // to bfloat16, as F.linear on a bfloat16 model does: 3-4x the float32 GEMM where the CPU has
    // bfloat16 dot products. The weights' rounding error is then that of the model's own weights.
    at::Tensor y = out.view({M, N});
    gemm_path(format, w, x.reshape({M, K}).contiguous(), b.defined() ? b.to(at::kBFloat16) : b, y, N);
    return out;
  }
  at::Tensor xf = x.reshape({M, K}).to(at::kFloat).contiguous();
  at::Tensor y = x.scalar_type() == at::kFloat ? out.view({M, N}) : at::empty({M, N}, xf.options());
  if (M <= kGemvMaxRows) {
    gemv_path(format, w, xf, b.defined() ? b.data_ptr<float>() : nullptr, y, N);
  } else {
    gemm_path(format, w, xf, b, y, N);
  }
  if (x.scalar_type() != at::kFloat) out.view({M, N}).copy_(y);
  return out;
}

// Several Q4_1 linears on one input: what linear_q4_1 gives for each weight, bitwise, in one call.
// Why: a decode step of a small model is mostly fixed costs per call (the op's dispatch, waking the
// thread pool and joining it, quantizing the activations), and a layer's q, k and v (or gate and
// up) read the same input: SmolLM2-135M's 7 GEMVs a layer become 4 calls under the graph pass that
// batches them (quantized_linear.graph_passes). Decode rows on weights that all have the GEMV layout
// share one activation quantization and one parallel region; anything else is linear_q4_1 per weight.
std::vector<at::Tensor> linear_q4_1_many(const at::Tensor& x, at::TensorList packed,
                                         const c10::List<std::optional<at::Tensor>>& bias,
                                         const c10::List<std::optional<at::Tensor>>& gemv, int64_t int8_passes) {
  const char* op = "linear_q4_1_many";
  const size_t n = packed.size();
  TORCH_CHECK(n > 0 && bias.size() == n && gemv.size() == n, op,
              ": give one bias and one gemv entry (None where there is none) for each packed weight; got ", n,
              " weights, ", bias.size(), " biases, ", gemv.size(), " gemv entries");
  kx::dtype_code(x, op);
  std::vector<LinearWeight> weights;
  bool all_grouped = true;
  for (size_t i = 0; i < n; ++i) {
    weights.push_back(checked_weight(x, packed[i], bias.get(i), kx::kQ4_1, gemv.get(i), op));
    all_grouped = all_grouped && weights.back().grouped != nullptr;
  }
  const int64_t K = weights.front().K, M = x.numel() / K;
  const int64_t passes = resolved_passes(int8_passes, M, all_grouped, x, op);
  std::vector<at::Tensor> outs;
  if (!(all_grouped && passes > 0 && M > 0 && M <= kGemvMaxRows)) {
    for (size_t i = 0; i < n; ++i) outs.push_back(linear(x, packed[i], bias.get(i), kx::kQ4_1, int8_passes, gemv.get(i), op));
    return outs;
  }
  at::Tensor xf = x.reshape({M, K}).to(at::kFloat).contiguous();
  std::vector<at::Tensor> ys;
  std::vector<GemvTarget> targets;
  for (const LinearWeight& lw : weights) {
    std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
    shape.back() = lw.N;
    outs.push_back(at::empty(shape, x.options()));
    ys.push_back(x.scalar_type() == at::kFloat ? outs.back().view({M, lw.N}) : at::empty({M, lw.N}, xf.options()));
    targets.push_back({lw.w, lw.grouped, lw.bias.defined() ? lw.bias.data_ptr<float>() : nullptr,
                       ys.back().data_ptr<float>(), lw.N});
  }
  gemv_i8_path(kx::kQ4_1, passes, xf, targets);
  if (x.scalar_type() != at::kFloat) {
    for (size_t i = 0; i < n; ++i) outs[i].view({M, weights[i].N}).copy_(ys[i]);
  }
  return outs;
}

at::Tensor linear_q8_0(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                       int64_t int8_passes, const std::optional<at::Tensor>& gemv) {
  return linear(x, packed, bias, kx::kQ8_0, int8_passes, gemv, "linear_q8_0");
}
at::Tensor linear_q4_1(const at::Tensor& x, const at::Tensor& packed, const std::optional<at::Tensor>& bias,
                       int64_t int8_passes, const std::optional<at::Tensor>& gemv) {
  return linear(x, packed, bias, kx::kQ4_1, int8_passes, gemv, "linear_q4_1");
}
at::Tensor gemv_layout_q8_0(const at::Tensor& packed) { return kx::gemv_layout(packed, kx::kQ8_0, "gemv_layout_q8_0"); }
at::Tensor gemv_layout_q4_1(const at::Tensor& packed) { return kx::gemv_layout(packed, kx::kQ4_1, "gemv_layout_q4_1"); }

// What the measured dispatch times (kx_choice.h): a Q4_1 weight of SmolLM2's MLP shape (1536 x 576)
// on 128 rows (the GEMM path, prefill) and on one row four times (the GEMV path, decode).
void workload() {
  static const at::Tensor packed = quantize_q4_1(kx::sample({1536, 576}, at::kFloat, 0.05)),
                          x = kx::sample({128, 576}), x1 = x.narrow(0, 0, 1).contiguous();
  linear_q4_1(x, packed, std::nullopt, 2, std::nullopt);
  for (int i = 0; i < 4; ++i) linear_q4_1(x1, packed, std::nullopt, -1, std::nullopt);  // the float GEMV
}
const kx::Workload measured("quantized_linear", &workload);

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("quantize_q8_0(Tensor weight) -> Tensor");
  m.def("quantize_q4_1(Tensor weight) -> Tensor");
  m.def("dequantize_q8_0(Tensor packed) -> Tensor");
  m.def("dequantize_q4_1(Tensor packed) -> Tensor");
  m.def("linear_q8_0(Tensor x, Tensor packed, Tensor? bias=None, int int8_passes=-1, Tensor? gemv=None) -> Tensor");
  m.def("linear_q4_1(Tensor x, Tensor packed, Tensor? bias=None, int int8_passes=-1, Tensor? gemv=None) -> Tensor");
  m.def("linear_q4_1_many(Tensor x, Tensor[] packed, Tensor?[] bias, Tensor?[] gemv, int int8_passes=-1) -> Tensor[]");
  m.def("gemv_layout_q8_0(Tensor packed) -> Tensor");
  m.def("gemv_layout_q4_1(Tensor packed) -> Tensor");
  m.def("int8_dot() -> str", &int8_dot);
  m.def("set_int8_dot(str kind) -> str", &set_int8_dot);
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
  m.def("reset_isa() -> str", &kx::reset_isa);
  m.def("isa_reason() -> str", &kx::isa_reason);
  m.def("isa_paths() -> str[]", &kx::isa_paths);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) {
  m.impl("quantize_q8_0", &quantize_q8_0);
  m.impl("quantize_q4_1", &quantize_q4_1);
  m.impl("dequantize_q8_0", &dequantize_q8_0);
  m.impl("dequantize_q4_1", &dequantize_q4_1);
  m.impl("linear_q8_0", &linear_q8_0);
  m.impl("linear_q4_1", &linear_q4_1);
  m.impl("linear_q4_1_many", &linear_q4_1_many);
  m.impl("gemv_layout_q8_0", &gemv_layout_q8_0);
  m.impl("gemv_layout_q4_1", &gemv_layout_q4_1);
}

// No backward (the layers say has_backward = False): PyTorch's C++ not-implemented kernel lets the
// forward run and fails a backward through it with the op's name. A Python autograd formula would
// cost several microseconds on every call outside inference mode (generate() runs under
// no_grad), 211 times per decoded token. The fake kernels are in the package's _registrations.py.
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, Autograd, m) {
  for (const char* op : {"quantize_q8_0", "quantize_q4_1", "dequantize_q8_0", "dequantize_q4_1", "linear_q8_0",
                         "linear_q4_1", "linear_q4_1_many", "gemv_layout_q8_0", "gemv_layout_q4_1"}) {
    m.impl(op, torch::autograd::autogradNotImplementedFallback());
  }
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
