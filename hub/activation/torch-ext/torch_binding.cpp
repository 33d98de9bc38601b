// Registers the activation ops under the kernel's metadata id and dispatches to the ISA's table.
#include "activation_table.h"
#include "registration.h"

#include "kx_autograd.h"
#include "kx_dispatch.h"
#include "kx_limits.h"

#include <ATen/Parallel.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <tuple>
#include <vector>

KX_ISA_TABLE(kx::ActivationTable, kx_activation_table)

namespace {

// Each op at each dtype has its own path choice (kx_choice.h), made on its own workload below; a
// unary op in bfloat16 or float16 also chooses its form: the table lookup below (0) or this path's
// formula computed (1), the same bits either way.
// Which form is faster can flip with the size (on one Zen 5 host GELU-tanh's bfloat16 formula beat
// the lookup by 1.06x at 128 tokens of 11008 and lost by 1.04x from 512, where the output streams
// past the cache): a 16-bit op from kLargeFrom elements has a size class of its own (kx_choice.h).
const kx::OpChoice& unary_choice(int op, int code, bool large);
const kx::OpChoice& gated_choice(int code);
constexpr int kLookup = 0, kFormula = 1;
constexpr int64_t kLargeFrom = kx::kStreamFromBytes / 2;

// A unary op on bfloat16 or float16 has only 65,536 inputs. So the first call evaluates this code
// path's formula (activation_isa.cpp) once on every one of them, and from then on the op is a
// table lookup: the same bits as the formula, for a load per element instead of 20 to 60 float32
// operations (NewGELU's bitwise-eager roundings are the most). The table is 128 KiB, one per code
// path, op and 16-bit dtype, built in tens of microseconds and kept for the process.
const uint16_t* value_table(const kx::ActivationTable& path, int op, int code) {
  static std::mutex mutex;
  static std::map<std::tuple<const void*, int, int>, std::unique_ptr<uint16_t[]>> tables;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<uint16_t[]>& values = tables[{&path, op, code}];
  if (!values) {
    std::vector<uint16_t> every(65536);
    std::iota(every.begin(), every.end(), uint16_t{0});
    values.reset(new uint16_t[65536 + 2]());  // a spare entry: a 32-bit gather of the last one stays inside
    path.unary[op][code](every.data(), values.get(), 65536);
  }
  return values.get();
}

// Packs values[each 16-bit lane of in] back into a 64-bit word.
inline uint64_t lookup4(const uint16_t* __restrict values, uint64_t in) {
  return values[in & 0xffff] | uint64_t{values[(in >> 16) & 0xffff]} << 16 |
         uint64_t{values[(in >> 32) & 0xffff]} << 32 | uint64_t{values[in >> 48]} << 48;
}

// y[i] = values[bits of x[i]] for i in [begin, end), four elements per 64-bit load and store;
// with `stream`, the stores bypass the cache (movnti), as kx_vec.h's map1 does.
void lookup_range(const uint16_t* __restrict values, const uint16_t* __restrict x, uint16_t* __restrict y,
                  int64_t begin, int64_t end, bool stream) {
  int64_t i = begin;
  for (; i < end && reinterpret_cast<uintptr_t>(y + i) % 8; ++i) y[i] = values[x[i]];
  uint64_t word;
#if defined(__SSE2__) && defined(__x86_64__)
  if (stream) {
    for (; i + 4 <= end; i += 4) {
      std::memcpy(&word, x + i, 8);
      _mm_stream_si64(reinterpret_cast<long long*>(y + i), static_cast<long long>(lookup4(values, word)));
    }
    _mm_sfence();  // streamed stores are weakly ordered: publish them before the join
  }
#endif
  for (; i + 4 <= end; i += 4) {
    std::memcpy(&word, x + i, 8);
    word = lookup4(values, word);
    std::memcpy(y + i, &word, 8);
  }
  for (; i < end; ++i) y[i] = values[x[i]];
}

// The lookup over n elements, split over torch's threads. Scalar on purpose: this unit is built
// for baseline x86-64, and on the CPU measured (Zen 4) these loads beat AVX-512 gathers (0.30
// against 0.37 ns per element on one core).
void lookup16(const uint16_t* values, const uint16_t* x, uint16_t* y, int64_t n) {
  const bool stream = n * 2 >= kx::kStreamFromBytes;
  if (n < kx::kMapSerialBelow) return lookup_range(values, x, y, 0, n, stream);
  at::parallel_for(0, n, kx::kMapSerialBelow,
                   [=](int64_t begin, int64_t end) { lookup_range(values, x, y, begin, end, stream); });
}

void run_unary(int op, const char* name, at::Tensor& out, const at::Tensor& x) {
  int code = kx::dtype_code(x, name);
  kx::check_out(out, x, name);
  if (x.numel() == 0) return;
  at::Tensor xc = x.contiguous();  // a strided input takes one extra copy, never a wrong result
  const kx::OpChoice& choice = unary_choice(op, code, xc.numel() >= kLargeFrom);
  const kx::ActivationTable& path = table(choice);
  if (code == 0 || kx::current_form(choice) == kFormula) {  // float32: always computed
    path.unary[op][code](xc.data_ptr(), out.data_ptr(), xc.numel());
  } else {
    lookup16(value_table(path, op, code), static_cast<const uint16_t*>(xc.data_ptr()),
             static_cast<uint16_t*>(out.data_ptr()), xc.numel());
  }
}

template <int Op>
at::Tensor unary(const at::Tensor& x) {
  static const char* names[] = {"silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick"};
  kx::dtype_code(x, names[Op]);
  at::Tensor out = kx::empty_output(x.sizes(), x.scalar_type());
  run_unary(Op, names[Op], out, x);
  return out;
}

template <int Op>
void unary_out(at::Tensor& out, const at::Tensor& x) {
  static const char* names[] = {"silu_out", "gelu_out", "gelu_tanh_out", "gelu_new_out", "gelu_fast_out",
                                "gelu_quick_out"};
  run_unary(Op, names[Op], out, x);
}

void silu_and_mul_out(at::Tensor& out, const at::Tensor& x) {
  int code = kx::dtype_code(x, "silu_and_mul");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0,
              "silu_and_mul: the last dimension must be even (it holds the gate and the up halves), got ",
              x.sizes());
  int64_t d = x.size(-1) / 2;
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = d;
  TORCH_CHECK(out.sizes() == at::IntArrayRef(shape) && out.scalar_type() == x.scalar_type() &&
                  out.is_contiguous(),
              "silu_and_mul: out= must be a contiguous ", x.scalar_type(), " tensor of shape ",
              at::IntArrayRef(shape));
  if (out.numel() == 0) return;
  at::Tensor xc = x.contiguous();
  int64_t rows = xc.numel() / (2 * d);
  const kx::ActivationTable& path = table(gated_choice(code));
  const uint16_t* silu_table = code == 0 ? nullptr : value_table(path, kx::kSilu, code);
  path.silu_and_mul[code](xc.data_ptr(), out.data_ptr(), rows, d, 2 * d, d, silu_table);
}

at::Tensor silu_and_mul(const at::Tensor& x) {
  kx::dtype_code(x, "silu_and_mul");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0,
              "silu_and_mul: the last dimension must be even, got ", x.sizes());
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() /= 2;
  at::Tensor out = kx::empty_output(shape, x.scalar_type());
  silu_and_mul_out(out, x);
  return out;
}

at::Tensor silu_and_mul_backward(const at::Tensor& grad, const at::Tensor& x) {
  int code = kx::dtype_code(x, "silu_and_mul_backward");
  kx::dtype_code(grad, "silu_and_mul_backward (grad)");
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) % 2 == 0, "silu_and_mul_backward: the last dimension must be even, got ",
              x.sizes());
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() /= 2;
  TORCH_CHECK(grad.sizes() == at::IntArrayRef(shape) && grad.scalar_type() == x.scalar_type(),
              "silu_and_mul_backward: grad must be a ", x.scalar_type(), " tensor of shape ", at::IntArrayRef(shape),
              ", got ", grad.scalar_type(), " ", grad.sizes());
  at::Tensor dx = kx::empty_output(x.sizes(), x.scalar_type());
  if (x.numel() == 0) return dx;
  int64_t d = shape.back();
  at::Tensor x2 = x.reshape({-1, 2 * d});
  if (x2.stride(1) != 1) x2 = x2.contiguous();
  at::Tensor g2 = grad.reshape({-1, d});  // an expanded grad (from .sum()) has row stride 0
  if (g2.stride(1) != 1) g2 = g2.contiguous();
  table(gated_choice(code)).silu_and_mul_backward[code](g2.data_ptr(), g2.stride(0), x2.data_ptr(), x2.stride(0),
                                                        dx.data_ptr(), x2.size(0), d);
  return dx;
}

// What the measured dispatch times (kx_choice.h), per op and dtype: SmolLM2's SiLU-and-mul and the
// unary activations at 128 tokens (intermediate size 1536).
template <int Code>
void gated_workload() {
  static const at::Tensor x = kx::sample({128, 3072}, at::kFloat, 4.0).to(kx::dtype_of(Code));
  for (int i = 0; i < 2; ++i) silu_and_mul(x);
}
template <int Op, int Code>
void unary_workload() {
  static const at::Tensor x = kx::sample({128, 1536}, at::kFloat, 4.0).to(kx::dtype_of(Code));
  for (int i = 0; i < 2; ++i) unary<Op>(x);
}
template <int Op, int Code>
void large_workload() {  // Llama-7B's intermediate size at 512 tokens (at 384, just past kLargeFrom, the
  // forms of GELU-tanh bfloat16 ran level, and the lookup won by 1.04x from 512 tokens on)
  static const at::Tensor x = kx::sample({512, 11008}, at::kFloat, 4.0).to(kx::dtype_of(Code));
  unary<Op>(x);
}

constexpr const char* kOpNames[] = {"silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick"};

template <int Op, int Code>
kx::OpChoice unary_slot() {
  std::vector<std::string> forms;
  if (Code != 0) forms = {"lookup", "formula"};
  return {"activation", std::string(kOpNames[Op]) + " " + kx::dtype_name(Code), &unary_workload<Op, Code>, forms};
}

// Registered in this order: SiLU-and-mul first (the op SmolLM2 runs), then the unary ops.
const kx::OpChoice gated_slots[3] = {{"activation", "silu_and_mul float32", &gated_workload<0>},
                                     {"activation", "silu_and_mul bfloat16", &gated_workload<1>},
                                     {"activation", "silu_and_mul float16", &gated_workload<2>}};
#define KX_UNARY_SLOTS(op) unary_slot<op, 0>(), unary_slot<op, 1>(), unary_slot<op, 2>()
const kx::OpChoice unary_slots[kx::kNumUnary][3] = {{KX_UNARY_SLOTS(kx::kSilu)},     {KX_UNARY_SLOTS(kx::kGelu)},
                                                    {KX_UNARY_SLOTS(kx::kGeluTanh)}, {KX_UNARY_SLOTS(kx::kGeluNew)},
                                                    {KX_UNARY_SLOTS(kx::kGeluFast)}, {KX_UNARY_SLOTS(kx::kGeluQuick)}};
#undef KX_UNARY_SLOTS

template <int Op, int Code>
kx::OpChoice large_slot() {
  return {"activation", std::string(kOpNames[Op]) + " " + kx::dtype_name(Code) + " large", &large_workload<Op, Code>,
          unary_slots[Op][Code]};
}
#define KX_LARGE_SLOTS(op) large_slot<op, 1>(), large_slot<op, 2>()
const kx::OpChoice large_slots[kx::kNumUnary][2] = {{KX_LARGE_SLOTS(kx::kSilu)},     {KX_LARGE_SLOTS(kx::kGelu)},
                                                    {KX_LARGE_SLOTS(kx::kGeluTanh)}, {KX_LARGE_SLOTS(kx::kGeluNew)},
                                                    {KX_LARGE_SLOTS(kx::kGeluFast)}, {KX_LARGE_SLOTS(kx::kGeluQuick)}};
#undef KX_LARGE_SLOTS

const kx::OpChoice& unary_choice(int op, int code, bool large) {
  return large && code != 0 ? large_slots[op][code - 1] : unary_slots[op][code];
}
const kx::OpChoice& gated_choice(int code) { return gated_slots[code]; }

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("silu(Tensor x) -> Tensor");
  m.def("gelu(Tensor x) -> Tensor");
  m.def("gelu_tanh(Tensor x) -> Tensor");
  m.def("gelu_new(Tensor x) -> Tensor");
  m.def("gelu_fast(Tensor x) -> Tensor");
  m.def("gelu_quick(Tensor x) -> Tensor");
  m.def("silu_and_mul(Tensor x) -> Tensor");
  m.def("silu_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_tanh_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_new_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_fast_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("gelu_quick_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("silu_and_mul_out(Tensor(a!) out, Tensor x) -> ()");
  m.def("silu_and_mul_backward(Tensor grad, Tensor x) -> Tensor");
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
  m.def("reset_isa() -> str", &kx::reset_isa);
  m.def("isa_reason() -> str", &kx::isa_reason);
  m.def("isa_paths() -> str[]", &kx::isa_paths);
  m.def("isa_choices() -> str[]", &kx::isa_choices);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) {
  m.impl("silu", &unary<kx::kSilu>);
  m.impl("gelu", &unary<kx::kGelu>);
  m.impl("gelu_tanh", &unary<kx::kGeluTanh>);
  m.impl("gelu_new", &unary<kx::kGeluNew>);
  m.impl("gelu_fast", &unary<kx::kGeluFast>);
  m.impl("gelu_quick", &unary<kx::kGeluQuick>);
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("silu_out", &unary_out<kx::kSilu>);
  m.impl("gelu_out", &unary_out<kx::kGelu>);
  m.impl("gelu_tanh_out", &unary_out<kx::kGeluTanh>);
  m.impl("gelu_new_out", &unary_out<kx::kGeluNew>);
  m.impl("gelu_fast_out", &unary_out<kx::kGeluFast>);
  m.impl("gelu_quick_out", &unary_out<kx::kGeluQuick>);
  m.impl("silu_and_mul_out", &silu_and_mul_out);
  m.impl("silu_and_mul_backward", &silu_and_mul_backward);
}

namespace {

using UnarySig = at::Tensor(const at::Tensor&);
using BackwardSig = at::Tensor(const at::Tensor&, const at::Tensor&);

constexpr const char* kUnaryNames[] = {"silu", "gelu", "gelu_tanh", "gelu_new", "gelu_fast", "gelu_quick"};
constexpr int kSiluAndMul = 6;  // after the unary ops, in the table of typed handles below

const c10::TypedOperatorHandle<UnarySig>& forward_op(int op) {
  static const auto ops = [] {
    std::vector<c10::TypedOperatorHandle<UnarySig>> v;
    for (const char* name : kUnaryNames) {
      v.push_back(kx::typed_op<UnarySig>((std::string(STRINGIFY(TORCH_EXTENSION_NAME) "::") + name).c_str()));
    }
    v.push_back(kx::typed_op<UnarySig>(STRINGIFY(TORCH_EXTENSION_NAME) "::silu_and_mul"));
    return v;
  }();
  return ops[op];
}

const c10::TypedOperatorHandle<BackwardSig>& silu_and_mul_backward_op() {
  static const auto op = kx::typed_op<BackwardSig>(STRINGIFY(TORCH_EXTENSION_NAME) "::silu_and_mul_backward");
  return op;
}

const double kSqrt2OverPi = std::sqrt(2.0 / M_PI);

// d/dx 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3), as s + x u' s (1 - s) with
// s = sigmoid(2u) = (1 + tanh(u)) / 2: ATen's gelu_backward forms 1 - tanh(u)^2, which cancels
// where tanh saturates (12 ulp off in float32 at |x| ~ 3), and 1 - s here is sigmoid(-2u),
// computed directly. In float32, for every input dtype (rounded once at the end). ATen ops, so
// the backward is differentiable again (double backward).
at::Tensor tanh_gelu_backward(const at::Tensor& grad, const at::Tensor& x) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor x2 = xf * xf;
  at::Tensor two_u = xf * (2 * kSqrt2OverPi) * (x2 * 0.044715 + 1);
  at::Tensor s = at::sigmoid(two_u);
  at::Tensor slope = xf * (2 * kSqrt2OverPi) * (x2 * (3 * 0.044715) + 1);
  return (grad.to(at::kFloat) * (s + slope * s * at::sigmoid(-two_u))).to(x.scalar_type());
}

at::Tensor gelu_quick_backward(const at::Tensor& grad, const at::Tensor& x) {
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor s = at::sigmoid(xf * 1.702);
  return (grad.to(at::kFloat) * (s + xf * 1.702 * s * (1 - s))).to(x.scalar_type());
}

// The backward of activation `op` at x: ATen's fused kernels for SiLU and GELU, the float32
// formulas above for NewGELU, FastGELU and QuickGELU, the fused C++ kernel for SiLU-and-mul.
at::Tensor backward_of(int op, const at::Tensor& grad, const at::Tensor& x) {
  switch (op) {
    case kx::kSilu: return at::silu_backward(grad, x);
    case kx::kGelu: return at::gelu_backward(grad, x, "none");
    case kx::kGeluTanh: return at::gelu_backward(grad, x, "tanh");
    case kx::kGeluNew:
    case kx::kGeluFast: return tanh_gelu_backward(grad, x);
    case kx::kGeluQuick: return gelu_quick_backward(grad, x);
    default: return silu_and_mul_backward_op().call(grad, x);
  }
}

// The autograd of activation `Op` (one input, one output): saves x, and the backward is
// backward_of(Op). The ops are called through the dispatcher, so torch.compile traces them.
template <int Op>
struct ActivationFunction : public torch::autograd::Function<ActivationFunction<Op>> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x});
    return forward_op(Op).call(x);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return {backward_of(Op, grads[0], ctx->get_saved_variables()[0])};
  }
};

// Without a graph to record (no_grad, or x does not require grad) the op runs directly below autograd.
template <int Op>
at::Tensor activation_autograd(const at::Tensor& x) {
  if (!kx::needs_graph({&x})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return forward_op(Op).call(x);
  }
  return ActivationFunction<Op>::apply(x);
}

}  // namespace

// The autograd kernels are in C++ (kx_autograd.h says why); the fake (meta) kernels are registered
// from Python, in the package's _registrations.py. The out= forms have no backward.
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, Autograd, m) {
  m.impl("silu", &activation_autograd<kx::kSilu>);
  m.impl("gelu", &activation_autograd<kx::kGelu>);
  m.impl("gelu_tanh", &activation_autograd<kx::kGeluTanh>);
  m.impl("gelu_new", &activation_autograd<kx::kGeluNew>);
  m.impl("gelu_fast", &activation_autograd<kx::kGeluFast>);
  m.impl("gelu_quick", &activation_autograd<kx::kGeluQuick>);
  m.impl("silu_and_mul", &activation_autograd<kSiluAndMul>);
  m.impl("silu_and_mul_backward", kx::no_double_backward_kernel());
  for (const char* name : {"silu_out", "gelu_out", "gelu_tanh_out", "gelu_new_out", "gelu_fast_out",
                           "gelu_quick_out", "silu_and_mul_out"}) {
    m.impl(name, kx::out_form_autograd_kernel());
  }
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
