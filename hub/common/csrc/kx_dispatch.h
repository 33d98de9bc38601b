// Registration-side helpers shared by the bundled kernels: the run-time ISA table (kx_choice.h
// chooses the path), input checks, output allocation, the out= forms' autograd kernel. The Python
// module itself comes from kernel-builder's registration.h (REGISTER_EXTENSION), included first
// by each torch_binding.cpp.
#pragma once

#include <ATen/ATen.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>
#include <sys/mman.h>

#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

// Every x86-64 build carries the AVX-512 and AVX2 code paths ([kernel.<name>_avx512bf16] ... in
// build.toml); other architectures carry the portable one only.
#if defined(__x86_64__) || defined(_M_X64)
#define KX_HAVE_AVX512 1
#define KX_HAVE_AVX2 1
#endif

// kernel-builder's registration.h defines TORCH_LIBRARY_EXPAND; the IMPL form is not in every version.
#ifndef TORCH_LIBRARY_IMPL_EXPAND
#define TORCH_LIBRARY_IMPL_EXPAND(NAME, DEVICE, MODULE) TORCH_LIBRARY_IMPL(NAME, DEVICE, MODULE)
#endif

#include "kx_choice.h"

namespace kx {

// The path chosen by measurement (kx_choice.h), or forced; one table per ISA unit. `slot` is an
// op's own choice (OpChoice::slot); -1 the repository-wide one (Workload).
template <typename Table>
inline const Table& pick(const Table& avx512bf16, const Table& avx512, const Table& avx2, const Table& portable,
                         int slot = -1) {
  switch (slot < 0 ? current_isa_index() : current_isa_index(slot)) {
#if defined(KX_HAVE_AVX512)
    case 0: return avx512bf16;
    case 1: return avx512;
#endif
#if defined(KX_HAVE_AVX2)
    case 2: return avx2;
#endif
    default: break;
  }
  (void)avx512bf16;
  (void)avx512;
  (void)avx2;
  return portable;
}

// Storage dtype code (kF32/kBF16/kF16), or a clear error the caller can fall back on.
inline int dtype_code(const at::Tensor& t, const char* op) {
  TORCH_CHECK(t.device().is_cpu(), op, ": this kernel runs on CPU tensors only, got a tensor on ",
              t.device(), "; keep this layer on PyTorch for that device");
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kBFloat16: return 1;
    case at::kHalf: return 2;
    default:
      TORCH_CHECK(false, op, ": supports float32, bfloat16 and float16, got ", t.scalar_type(),
                  "; keep this layer on PyTorch for that dtype");
  }
  return -1;
}

// The dtype of a storage code, and its name in an op's choice ("silu bfloat16").
inline at::ScalarType dtype_of(int code) {
  static const at::ScalarType types[3] = {at::kFloat, at::kBFloat16, at::kHalf};
  return types[code];
}
inline const char* dtype_name(int code) {
  static const char* names[3] = {"float32", "bfloat16", "float16"};
  return names[code];
}

inline void check_out(const at::Tensor& out, const at::Tensor& like, const char* op) {
  TORCH_CHECK(out.sizes() == like.sizes() && out.scalar_type() == like.scalar_type() &&
                  out.is_contiguous() && out.device() == like.device(),
              op, ": out= must be a contiguous ", like.scalar_type(), " tensor of shape ", like.sizes(),
              ", got ", out.scalar_type(), " ", out.sizes(), out.is_contiguous() ? "" : " (non-contiguous)");
}

// Outputs of 32 MiB and more come from 2 MiB transparent huge pages, and their blocks are kept
// for the next output of the same size. glibc serves every such allocation with a fresh mmap (its
// adaptive threshold stops at 32 MiB) and unmaps it on free, so every call faults in and zeroes
// every page of its output again: at LLM sizes that costs more than the kernel itself (about 25 ms
// for a 2048 x 11008 float32 activation that the kernel computes in 5; 65.8 against 13.4 ms with
// out= for silu_and_mul on a Zen 3, where THP's `defrag=madvise` also compacts memory on those
// faults). Huge pages make the faults 512 times fewer; reusing a freed block of the same size
// (a model's layers produce the same shapes over and over) removes them and the zeroing. At most
// kKeepBytes of freed blocks are kept, oldest returned to the system first. PyTorch offers huge
// pages for every tensor behind THP_MEM_ALLOC_ENABLE=1; here it is only the kernels' own outputs.
// MADV_HUGEPAGE is advice: where THP is off, 4 KiB pages it is.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePagesFrom = size_t{32} << 20;
constexpr size_t kKeepBytes = size_t{128} << 20;  // per kernel library

struct HugePageAllocator final : c10::Allocator {
  // Blocks handed out (pointer -> rounded size) and freed blocks kept for reuse, oldest first.
  // Never destroyed: a tensor may be freed during static destruction, after any static here.
  struct Blocks {
    std::mutex mutex;
    std::unordered_map<void*, size_t> live;
    std::deque<std::pair<void*, size_t>> kept;
    size_t kept_bytes = 0;
  };
  static Blocks& blocks() {
    static Blocks* b = new Blocks;
    return *b;
  }

  static void release(void* p) {
    Blocks& b = blocks();
    std::lock_guard<std::mutex> lock(b.mutex);
    auto it = b.live.find(p);
    if (it == b.live.end()) return std::free(p);
    size_t n = it->second;
    b.live.erase(it);
    if (n > kKeepBytes) return std::free(p);
    b.kept.emplace_back(p, n);
    b.kept_bytes += n;
    while (b.kept_bytes > kKeepBytes) {
      std::free(b.kept.front().first);
      b.kept_bytes -= b.kept.front().second;
      b.kept.pop_front();
    }
  }

  c10::DataPtr allocate(size_t n) override {
    const size_t rounded = (n + kHugePage - 1) & ~(kHugePage - 1);
    Blocks& b = blocks();
    void* p = nullptr;
    {
      std::lock_guard<std::mutex> lock(b.mutex);
      for (auto it = b.kept.rbegin(); it != b.kept.rend(); ++it) {  // newest first: likeliest in cache
        if (it->second == rounded) {
          p = it->first;
          b.kept_bytes -= rounded;
          b.kept.erase(std::next(it).base());
          break;
        }
      }
    }
    if (!p) {
      TORCH_CHECK(posix_memalign(&p, kHugePage, rounded) == 0, "out of memory: could not allocate ", n, " bytes");
      madvise(p, rounded, MADV_HUGEPAGE);
    }
    {
      std::lock_guard<std::mutex> lock(b.mutex);
      b.live.emplace(p, rounded);
    }
    return {p, p, &release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    default_copy_data(dest, src, count);
  }
};

// A contiguous CPU tensor for a kernel's result: at::empty, or huge-page backed when large.
inline at::Tensor empty_output(at::IntArrayRef sizes, at::ScalarType dtype) {
  size_t nbytes = static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(dtype);
  if (nbytes < kHugePagesFrom) return at::empty(sizes, at::TensorOptions().dtype(dtype));
  static HugePageAllocator allocator;
  return at::detail::empty_generic(sizes, &allocator, c10::DispatchKeySet(c10::DispatchKey::CPU), dtype,
                                   c10::MemoryFormat::Contiguous);
}

// Autograd kernel of the out= forms. They write into the caller's tensor and record no graph, so
// with an input that requires grad they would leave a result without a gradient path: refuse that
// call, naming the functional form that has a backward. Otherwise run the op below autograd and
// bump the version of every tensor it writes, as ATen's own out= ops do (a tensor saved for a
// backward and then overwritten is caught instead of silently reused).
inline void out_form_autograd(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const size_t n = schema.arguments().size();
  auto args = torch::jit::last(*stack, n);
  if (at::GradMode::is_enabled()) {
    for (const c10::IValue& arg : args) {
      TORCH_CHECK(!(arg.isTensor() && arg.toTensor().requires_grad()), schema.name(),
                  ": the out= form has no backward and an input requires grad; call the functional form "
                  "(without out=), which has one, or run under torch.no_grad()");
    }
  }
  std::vector<at::Tensor> written;
  for (size_t i = 0; i < n; ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias && alias->isWrite() && args[i].isTensor()) written.push_back(args[i].toTensor());
  }
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  for (const at::Tensor& t : written) torch::autograd::impl::bump_version(t);
}

inline torch::CppFunction out_form_autograd_kernel() {
  return torch::CppFunction::makeFromBoxedFunction<&out_form_autograd>();
}

}  // namespace kx

#define KX_CAT_(a, b) a##b
#define KX_CAT(a, b) KX_CAT_(a, b)

// Declares the per-ISA tables `<prefix>_avx512bf16/_avx512/_avx2/_portable` that the ISA units
// define, `table()`, the one this CPU runs for the repository-wide choice, and `table(op)`, the one
// an op's own choice (a kx::OpChoice) runs. Use once, at global scope, in a registration unit.
#if defined(KX_HAVE_AVX512) && defined(KX_HAVE_AVX2)
#define KX_ISA_TABLE(Type, prefix)                                                                      \
  extern const Type prefix##_avx512bf16, prefix##_avx512, prefix##_avx2, prefix##_portable;            \
  [[maybe_unused]] static const Type& table() {                                                        \
    return kx::pick(prefix##_avx512bf16, prefix##_avx512, prefix##_avx2, prefix##_portable);           \
  }                                                                                                    \
  [[maybe_unused]] static const Type& table(const kx::OpChoice& op) {                                  \
    return kx::pick(prefix##_avx512bf16, prefix##_avx512, prefix##_avx2, prefix##_portable, op.slot);  \
  }
#else
#define KX_ISA_TABLE(Type, prefix)                                                                  \
  extern const Type prefix##_portable;                                                             \
  [[maybe_unused]] static const Type& table() { return prefix##_portable; }                        \
  [[maybe_unused]] static const Type& table(const kx::OpChoice&) { return prefix##_portable; }
#endif
