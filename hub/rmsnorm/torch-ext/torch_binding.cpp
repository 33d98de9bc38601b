// Registers the RMSNorm ops under the kernel's metadata id and dispatches to the ISA's table.
#include "registration.h"

#include "kx_autograd.h"
#include "kx_dispatch.h"
#include "kx_limits.h"
#include "rmsnorm_table.h"

#include <ATen/Parallel.h>

#include <algorithm>

KX_ISA_TABLE(kx::RmsNormTable, kx_rmsnorm_table)

namespace {

at::ScalarType out_dtype(const at::Tensor& x, const at::Tensor& w) {
  return x.scalar_type() == w.scalar_type() ? x.scalar_type() : at::kFloat;
}

// Each input dtype has its own path choice (kx_choice.h), made on its own workload below.
const kx::OpChoice& op_for(int code);

void rms_norm_out(at::Tensor& out, const at::Tensor& x, const at::Tensor& weight, double eps) {
  int xc = kx::dtype_code(x, "rms_norm");
  int wc = kx::dtype_code(weight, "rms_norm (weight)");
  TORCH_CHECK(x.dim() >= 1, "rms_norm: input must have at least one dimension");
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight of shape ",
              weight.sizes(), " does not match the last dimension of the input ", x.sizes());
  TORCH_CHECK(out.sizes() == x.sizes() && out.scalar_type() == out_dtype(x, weight) && out.is_contiguous(),
              "rms_norm: out= must be a contiguous ", out_dtype(x, weight), " tensor of shape ", x.sizes());
  if (x.numel() == 0) return;
  int64_t hidden = x.size(-1);
  // Rows may be strided (a view of a larger buffer) as long as each row is contiguous.
  at::Tensor x2 = x.reshape({-1, hidden});
  if (x2.stride(1) != 1) x2 = x2.contiguous();
  at::Tensor w = weight.contiguous();
  table(op_for(xc)).fn[xc][wc](x2.data_ptr(), x2.stride(0), w.data_ptr(), out.data_ptr(), x2.size(0), hidden,
                     static_cast<float>(eps));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  kx::dtype_code(x, "rms_norm");
  kx::dtype_code(weight, "rms_norm (weight)");
  at::Tensor out = kx::empty_output(x.sizes(), out_dtype(x, weight));
  rms_norm_out(out, x, weight, eps);
  return out;
}

// Rows per partial dw sum: each block of rows sums its share of dw in float32 (a short sequential
// sum), and ATen's cascade sum adds the blocks' partials, so dw is as accurate as eager's.
constexpr int64_t kRowsPerPartial = 32;

// The gradients of rms_norm: (dx, dw). dw is only computed with `weight_grad` (else a zero-size
// tensor, so a frozen norm weight costs nothing). Blocks of rows run in parallel.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad, const at::Tensor& x,
                                                     const at::Tensor& weight, double eps, bool weight_grad) {
  int xc = kx::dtype_code(x, "rms_norm_backward");
  int wc = kx::dtype_code(weight, "rms_norm_backward (weight)");
  kx::dtype_code(grad, "rms_norm_backward (grad)");
  TORCH_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1),
              "rms_norm_backward: weight of shape ", weight.sizes(), " does not match the input ", x.sizes());
  TORCH_CHECK(grad.sizes() == x.sizes() && grad.scalar_type() == out_dtype(x, weight),
              "rms_norm_backward: grad must be a ", out_dtype(x, weight), " tensor of shape ", x.sizes(), ", got ",
              grad.scalar_type(), " ", grad.sizes());
  at::Tensor dx = kx::empty_output(x.sizes(), x.scalar_type());
  if (x.numel() == 0) {
    return {dx, weight_grad ? at::zeros_like(weight) : at::empty({0}, weight.options())};
  }
  int64_t hidden = x.size(-1);
  at::Tensor x2 = x.reshape({-1, hidden});
  if (x2.stride(1) != 1) x2 = x2.contiguous();
  at::Tensor g2 = grad.reshape({-1, hidden});  // an expanded grad (from .sum()) has row stride 0
  if (g2.stride(1) != 1) g2 = g2.contiguous();
  at::Tensor w = weight.contiguous();
  int64_t rows = x2.size(0);
  int64_t chunks = (rows + kRowsPerPartial - 1) / kRowsPerPartial;
  at::Tensor partial = weight_grad ? at::zeros({chunks, hidden}, x.options().dtype(at::kFloat)) : at::Tensor();
  float* dw = weight_grad ? partial.data_ptr<float>() : nullptr;
  auto fn = table(op_for(xc)).bwd[xc][wc];
  auto run = [&](int64_t c) {
    fn(g2.data_ptr(), g2.stride(0), x2.data_ptr(), x2.stride(0), w.data_ptr(), dx.data_ptr(),
       dw ? dw + c * hidden : nullptr, c * kRowsPerPartial, std::min(rows, (c + 1) * kRowsPerPartial), hidden,
       static_cast<float>(eps));
  };
  // Small jobs stay on this thread (waking the pool costs more), as the forward's do.
  int64_t grain = rows * hidden < kx::kSerialBelow ? chunks : 1;
  at::parallel_for(0, chunks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) run(c);
  });
  at::Tensor dweight = weight_grad ? partial.sum(0).to(weight.scalar_type()) : at::empty({0}, weight.options());
  return {dx, dweight};
}

// What the measured dispatch times (kx_choice.h), per input dtype: SmolLM2's RMSNorm at 256 tokens.
template <int Code>
void workload() {
  static const at::Tensor x = kx::sample({256, 576}, kx::dtype_of(Code)), w = kx::sample({576}, kx::dtype_of(Code));
  for (int i = 0; i < 6; ++i) rms_norm(x, w, 1e-5);
}
const kx::OpChoice by_dtype[3] = {{"rmsnorm", "rms_norm float32", &workload<0>},
                                  {"rmsnorm", "rms_norm bfloat16", &workload<1>},
                                  {"rmsnorm", "rms_norm float16", &workload<2>}};
const kx::OpChoice& op_for(int code) { return by_dtype[code]; }

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("rms_norm_out(Tensor(a!) out, Tensor x, Tensor weight, float eps) -> ()");
  m.def("rms_norm_backward(Tensor grad, Tensor x, Tensor weight, float eps, bool weight_grad) -> (Tensor, Tensor)");
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
  m.def("reset_isa() -> str", &kx::reset_isa);
  m.def("isa_reason() -> str", &kx::isa_reason);
  m.def("isa_paths() -> str[]", &kx::isa_paths);
  m.def("isa_choices() -> str[]", &kx::isa_choices);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rms_norm_out", &rms_norm_out);
  m.impl("rms_norm_backward", &rms_norm_backward);
}

namespace {

using RmsNormSig = at::Tensor(const at::Tensor&, const at::Tensor&, double);
using RmsNormBackwardSig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&,
                                                              const at::Tensor&, double, bool);

const c10::TypedOperatorHandle<RmsNormSig>& rms_norm_op() {
  static const auto op = kx::typed_op<RmsNormSig>(STRINGIFY(TORCH_EXTENSION_NAME) "::rms_norm");
  return op;
}

const c10::TypedOperatorHandle<RmsNormBackwardSig>& rms_norm_backward_op() {
  static const auto op = kx::typed_op<RmsNormBackwardSig>(STRINGIFY(TORCH_EXTENSION_NAME) "::rms_norm_backward");
  return op;
}

// rms_norm's autograd: saves x and weight, and its backward is the fused rms_norm_backward (dw only
// when the weight needs a gradient). The ops are called through the dispatcher, so torch.compile
// traces them (with the fake kernels of _registrations.py) as it traces ATen's.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({x, weight});
    ctx->saved_data["eps"] = eps;
    return rms_norm_op().call(x, weight, eps);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const bool weight_grad = ctx->needs_input_grad(1);
    auto [dx, dw] = rms_norm_backward_op().call(grads[0], saved[0], saved[1], ctx->saved_data["eps"].toDouble(),
                                                weight_grad);
    return {ctx->needs_input_grad(0) ? dx : at::Tensor(), weight_grad ? dw : at::Tensor(), at::Tensor()};
  }
};

// Without a graph to record (no_grad, or nothing requires grad) the op runs directly below autograd.
at::Tensor rms_norm_autograd(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (!kx::needs_graph({&x, &weight})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return rms_norm_op().call(x, weight, eps);
  }
  return RmsNormFunction::apply(x, weight, eps);
}

}  // namespace

// The autograd kernels are in C++ (kx_autograd.h says why); the fake (meta) kernels are registered
// from Python, in the package's _registrations.py. The out= form has no backward.
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, Autograd, m) {
  m.impl("rms_norm", &rms_norm_autograd);
  m.impl("rms_norm_backward", kx::no_double_backward_kernel());
  m.impl("rms_norm_out", kx::out_form_autograd_kernel());
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
