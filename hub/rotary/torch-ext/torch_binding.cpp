// Registers the rotary op under the kernel's metadata id and dispatches to the ISA's table.
#include "registration.h"

#include "kx_dispatch.h"
#include "rotary_table.h"

KX_ISA_TABLE(kx::RotaryTable, kx_rotary_table)

namespace {

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
  table().fn[code](x.data_ptr(), c.data_ptr(), s.data_ptr(), out.data_ptr(), x.numel() / d, d, index);
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

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, m) {
  m.def("apply_rotary(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim) -> (Tensor, Tensor)");
  m.def(
      "apply_rotary_out(Tensor(a!) q_out, Tensor(b!) k_out, Tensor q, Tensor k, Tensor cos, Tensor sin, "
      "int unsqueeze_dim) -> ()");
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
}

TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CPU, m) {
  m.impl("apply_rotary", &apply_rotary);
  m.impl("apply_rotary_out", &apply_rotary_out);
}

// apply_rotary's autograd formula and fake (meta) kernel are registered from Python, in the
// package's _registrations.py, as PyTorch's custom-op guide prescribes; the out= form has none.
TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, Autograd, m) { m.impl("apply_rotary_out", kx::out_form_autograd_kernel()); }

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
