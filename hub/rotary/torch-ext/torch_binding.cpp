// Registers the rotary op under the kernel's metadata id and dispatches to the ISA's table.
#include "registration.h"

#include "kx_autograd.h"
#include "kx_dispatch.h"
#include "rotary_table.h"

KX_ISA_TABLE(kx::RotaryTable, kx_rotary_table)

namespace {

// Each dtype has its own path choice (kx_choice.h), made on its own workload below.
const kx::OpChoice& op_for(int code);

// Rotates x into `out` (contiguous, x's shape and dtype), or into a new tensor when out is undefined.
at::Tensor rotate(const at::Tensor& x_in, const at::Tensor& cos, const at::Tensor& sin, int code,
                  at::Tensor out = {}) {
  TORCH_CHECK(x_in.dim() >= 1 && x_in.size(-1) % 2 == 0 && x_in.size(-1) == cos.size(-1),
              "apply_rotary: the last dimension must be even and match cos/sin, got ", x_in.sizes(), " and ",
              cos.sizes());
  TORCH_CHECK(x_in.dim() - 1 <= kx::RowIndex::kMaxDims, "apply_rotary: too many dimensions");
  TORCH_CHECK(at::infer_size(x_in.sizes(), cos.sizes()) == x_in.sizes(), "apply_rotary: cos of shape ",
              cos.sizes(), " does not broadcast to ", x_in.sizes());
  at::Tensor x = x_in.stride(-1) == 1 ? x_in : x_in.contiguous();
  at::Tensor c = cos.expand(x.sizes());
  at::Tensor s = sin.expand(x.sizes());
  if (c.stride(-1) != 1) c = c.contiguous();
  if (s.stride(-1) != 1) s = s.contiguous();
  if (out.defined()) {
    kx::check_out(out, x, "apply_rotary_out");
  } else {
    out = kx::empty_output(x.sizes(), x.scalar_type());
  }
  if (x.numel() == 0) return out;
  kx::RowIndex index{};
  index.dims = static_cast<int>(x.dim()) - 1;
  const at::Tensor* tensors[3] = {&x, &c, &s};
  for (int dim = 0; dim < index.dims; ++dim) {
    index.sizes[dim] = x.size(dim);
    for (int t = 0; t < 3; ++t) index.strides[t][dim] = tensors[t]->stride(dim);
  }
  int64_t d = x.size(-1);
  table(op_for(code)).fn[code](x.data_ptr(), c.data_ptr(), s.data_ptr(), out.data_ptr(), x.numel() / d, d, index);
  return out;
}

int common_dtype_code(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin) {
  int code = kx::dtype_code(q, "apply_rotary");
  for (const at::Tensor* t : {&k, &cos, &sin}) {
    kx::dtype_code(*t, "apply_rotary");
    TORCH_CHECK(t->scalar_type() == q.scalar_type(), "apply_rotary: q, k, cos and sin must share a dtype, got ",
                q.scalar_type(), " and ", t->scalar_type());
  }
  return code;
}

std::tuple<at::Tensor, at::Tensor> apply_rotary(const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                                                const at::Tensor& sin, int64_t unsqueeze_dim) {
  int code = common_dtype_code(q, k, cos, sin);
  at::Tensor c = cos.unsqueeze(unsqueeze_dim), s = sin.unsqueeze(unsqueeze_dim);
  return {rotate(q, c, s, code), rotate(k, c, s, code)};
}

void apply_rotary_out(at::Tensor& q_out, at::Tensor& k_out, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& cos, const at::Tensor& sin, int64_t unsqueeze_dim) {
  int code = common_dtype_code(q, k, cos, sin);
  at::Tensor c = cos.unsqueeze(unsqueeze_dim), s = sin.unsqueeze(unsqueeze_dim);
  rotate(q, c, s, code, q_out);
  rotate(k, c, s, code, k_out);
}

// What the measured dispatch times (kx_choice.h), per dtype: SmolLM2's rotary at 128 tokens.
template <int Code>
void workload() {
  static const at::ScalarType t = kx::dtype_of(Code);
  static const at::Tensor q = kx::sample({1, 9, 128, 64}, t), k = kx::sample({1, 3, 128, 64}, t),
                          cos = kx::sample({1, 128, 64}, t), sin = kx::sample({1, 128, 64}, t, 0.5);
  for (int i = 0; i < 4; ++i) apply_rotary(q, k, cos, sin, 1);
}
const kx::OpChoice by_dtype[3] = {{"rotary", "rotary float32", &workload<0>},
                                  {"rotary", "rotary bfloat16", &workload<1>},
                                  {"rotary", "rotary float16", &workload<2>}};
const kx::OpChoice& op_for(int code) { return by_dtype[code]; }

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("apply_rotary(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim) -> (Tensor, Tensor)");
  m.def(
      "apply_rotary_out(Tensor(a!) q_out, Tensor(b!) k_out, Tensor q, Tensor k, Tensor cos, Tensor sin, "
      "int unsqueeze_dim) -> ()");
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
  m.def("reset_isa() -> str", &kx::reset_isa);
  m.def("isa_reason() -> str", &kx::isa_reason);
  m.def("isa_paths() -> str[]", &kx::isa_paths);
  m.def("isa_choices() -> str[]", &kx::isa_choices);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) {
  m.impl("apply_rotary", &apply_rotary);
  m.impl("apply_rotary_out", &apply_rotary_out);
}

namespace {

using RotarySig = std::tuple<at::Tensor, at::Tensor>(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                                     const at::Tensor&, int64_t);

const c10::TypedOperatorHandle<RotarySig>& rotary_op() {
  static const auto op = kx::typed_op<RotarySig>(STRINGIFY(TORCH_EXTENSION_NAME) "::apply_rotary");
  return op;
}

at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({-x.slice(-1, half), x.slice(-1, 0, half)}, -1);
}

// apply_rotary's autograd. The rotation is linear in q and k, and its transpose is the same
// rotation with sin replaced by -cat(sin[..., d/2:], sin[..., :d/2]): so the backward for q and k
// is the forward kernel itself, run on the gradients, with the same roundings eager's autograd
// makes. Gradients for cos and sin (rarely wanted: they come from the position embedding) use the
// eager formula, and only then are q and k kept for the backward.
struct RotaryFunction : public torch::autograd::Function<RotaryFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q,
                                                const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                                                int64_t unsqueeze_dim) {
    at::AutoDispatchBelowADInplaceOrView guard;
    const bool trig_grad = cos.requires_grad() || sin.requires_grad();
    ctx->saved_data["unsqueeze_dim"] = unsqueeze_dim;
    ctx->saved_data["trig_grad"] = trig_grad;
    if (trig_grad) {
      ctx->save_for_backward({cos, sin, q, k});
    } else {
      ctx->save_for_backward({cos, sin});
    }
    auto [q_out, k_out] = rotary_op().call(q, k, cos, sin, unsqueeze_dim);
    return {q_out, k_out};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &cos = saved[0], &sin = saved[1], &grad_q = grads[0], &grad_k = grads[1];
    const int64_t dim = ctx->saved_data["unsqueeze_dim"].toInt();
    at::Tensor dq, dk, dcos, dsin;
    if (ctx->needs_input_grad(0) || ctx->needs_input_grad(1)) {
      const int64_t half = sin.size(-1) / 2;
      at::Tensor sin_t = -at::cat({sin.slice(-1, half), sin.slice(-1, 0, half)}, -1);
      std::tie(dq, dk) = rotary_op().call(grad_q, grad_k, cos, sin_t, dim);
      if (!ctx->needs_input_grad(0)) dq = at::Tensor();
      if (!ctx->needs_input_grad(1)) dk = at::Tensor();
    }
    if (ctx->needs_input_grad(2) || ctx->needs_input_grad(3)) {
      const at::Tensor &q = saved[2], &k = saved[3];
      const auto shape = cos.unsqueeze(dim).sizes().vec();
      auto reduce = [&](const at::Tensor& a, const at::Tensor& b) {
        return (a.sum_to_size(shape) + b.sum_to_size(shape)).squeeze(dim);
      };
      if (ctx->needs_input_grad(2)) dcos = reduce(grad_q * q, grad_k * k);
      if (ctx->needs_input_grad(3)) dsin = reduce(grad_q * rotate_half(q), grad_k * rotate_half(k));
    }
    return {dq, dk, dcos, dsin, at::Tensor()};
  }
};

// Without a graph to record (no_grad, or no input requires grad) the op runs directly below autograd.
std::tuple<at::Tensor, at::Tensor> apply_rotary_autograd(const at::Tensor& q, const at::Tensor& k,
                                                         const at::Tensor& cos, const at::Tensor& sin,
                                                         int64_t unsqueeze_dim) {
  if (!kx::needs_graph({&q, &k, &cos, &sin})) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return rotary_op().call(q, k, cos, sin, unsqueeze_dim);
  }
  auto out = RotaryFunction::apply(q, k, cos, sin, unsqueeze_dim);
  return {out[0], out[1]};
}

}  // namespace

// The autograd kernels are in C++ (kx_autograd.h says why); the fake (meta) kernel is registered
// from Python, in the package's _registrations.py. The out= form has no backward.
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, Autograd, m) {
  m.impl("apply_rotary", &apply_rotary_autograd);
  m.impl("apply_rotary_out", kx::out_form_autograd_kernel());
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
