// Helpers for the C++ autograd kernels of the bundled ops (DispatchKey::Autograd).
//
// Why C++: a Python autograd formula (torch.library.register_autograd) costs about 9 us on every
// call of the op, with or without grad, more than the kernel itself on a decode step's shapes.
// A torch::autograd::Function registered for the Autograd key costs well under a microsecond
// when nothing requires grad. The fake (meta) kernels stay in Python (torch.compile reads them).
#pragma once

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/basic_ops.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/library.h>

#include <algorithm>
#include <string>
#include <vector>

namespace kx {

// The typed handle of `ns::name` (an op this library defines); callers keep it in a static.
template <typename Signature>
c10::TypedOperatorHandle<Signature> typed_op(const char* qualified_name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(qualified_name, "").typed<Signature>();
}

// True when the autograd graph must record this call: grad mode on and an input requires grad.
inline bool needs_graph(std::initializer_list<const at::Tensor*> inputs) {
  if (!at::GradMode::is_enabled()) return false;
  return std::any_of(inputs.begin(), inputs.end(), [](const at::Tensor* t) { return t->requires_grad(); });
}

// Autograd kernel of the fused backward ops (rms_norm_backward, silu_and_mul_backward): they have
// no backward of their own. The op runs below autograd; when the graph records it (a backward with
// create_graph=True), its outputs get a node that raises if differentiated (double backward),
// naming the op, instead of silently having no gradient path.
inline void no_double_backward(const c10::OperatorHandle& op, c10::DispatchKeySet keys, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  auto args = torch::jit::last(*stack, schema.arguments().size());
  std::vector<at::Tensor> inputs;
  bool track = false;
  for (const c10::IValue& arg : args) {
    if (!arg.isTensor()) continue;
    inputs.push_back(arg.toTensor());
    track = track || inputs.back().requires_grad();
  }
  track = track && at::GradMode::is_enabled();
  {
    at::AutoDispatchBelowADInplaceOrView guard;
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
  }
  if (!track) return;
  auto node = c10::make_intrusive<torch::autograd::Error>(
      schema.name() +
      ": the fused backward has no backward of its own (double backward); use PyTorch's formula where "
      "higher-order gradients are needed");
  node->set_next_edges(torch::autograd::collect_next_edges(inputs));
  for (const c10::IValue& out : torch::jit::last(*stack, schema.returns().size())) {
    if (out.isTensor() && at::isFloatingType(out.toTensor().scalar_type())) {
      torch::autograd::set_history(out.toTensor(), node);
    }
  }
}

inline torch::CppFunction no_double_backward_kernel() {
  return torch::CppFunction::makeFromBoxedFunction<&no_double_backward>();
}

}  // namespace kx
