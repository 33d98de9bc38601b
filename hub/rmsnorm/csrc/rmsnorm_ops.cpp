// Registers the RMSNorm ops under the kernel's metadata id and dispatches to the ISA's table.
#include "kx_dispatch.h"
#include "rmsnorm_table.h"

KX_ISA_TABLE(kx::RmsNormTable, kx_rmsnorm_table)

namespace {

at::ScalarType out_dtype(const at::Tensor& x, const at::Tensor& w) {
  return x.scalar_type() == w.scalar_type() ? x.scalar_type() : at::kFloat;
}

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
  table().fn[xc][wc](x2.data_ptr(), x2.stride(0), w.data_ptr(), out.data_ptr(), x2.size(0), hidden,
                     static_cast<float>(eps));
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  kx::dtype_code(x, "rms_norm");
  kx::dtype_code(weight, "rms_norm (weight)");
  at::Tensor out = kx::empty_output(x.sizes(), out_dtype(x, weight));
  rms_norm_out(out, x, weight, eps);
  return out;
}

}  // namespace

TORCH_LIBRARY(KX_OPS_NS, m) {
  m.def("rms_norm(Tensor x, Tensor weight, float eps) -> Tensor");
  m.def("rms_norm_out(Tensor(a!) out, Tensor x, Tensor weight, float eps) -> ()");
  m.def("isa() -> str", &kx::current_isa);
  m.def("set_isa(str isa) -> str", &kx::set_isa);
}

TORCH_LIBRARY_IMPL(KX_OPS_NS, CPU, m) {
  m.impl("rms_norm", &rms_norm);
  m.impl("rms_norm_out", &rms_norm_out);
}

KX_PYTHON_MODULE(KX_OPS_NS)
