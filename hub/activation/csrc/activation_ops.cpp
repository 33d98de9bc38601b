// Registers the activation ops under the kernel's metadata id and dispatches to the ISA's table.
#include "activation_table.h"
#include "kx_dispatch.h"

KX_ISA_TABLE(kx::ActivationTable, kx_activation_table)

namespace {

void run_unary(int op, const char* name, at::Tensor& out, const at::Tensor& x) {
  int code = kx::dtype_code(x, name);
  kx::check_out(out, x, name);
  if (x.numel() == 0) return;
  at::Tensor xc = x.contiguous();  // a strided input takes one extra copy, never a wrong result
  table().unary[op][code](xc.data_ptr(), out.data_ptr(), xc.numel());
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
  table().silu_and_mul[code](xc.data_ptr(), out.data_ptr(), rows, d, 2 * d, d);
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

}  // namespace

TORCH_LIBRARY(KX_OPS_NS, m) {
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
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
}

TORCH_LIBRARY_IMPL(KX_OPS_NS, CPU, m) {
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
}

KX_PYTHON_MODULE(KX_OPS_NS)
