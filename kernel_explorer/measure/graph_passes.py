"""The Inductor graph passes that the kernels switched on in a model offer for their own ops.

Why: some of a kernel's gains are only reachable across calls. The bundled quantized_linear, for
one, can run a layer's q, k and v projections (or gate and up) in one call that quantizes their
shared input once and joins the thread pool once (`linear_q4_1_many`); which calls may be batched is
only known in a traced graph. A kernel package says so by exporting `graph_passes()`, a list of
Inductor custom graph passes (`torch._inductor.custom_graph_pass.CustomGraphPass`) for its ops.

Nothing here changes a global compiler setting, and importing a kernel must not either: the
explorer's `StaticDecoder` passes the offered passes to its own `torch.compile` (Inductor's
`post_grad_custom_post_pass` option) and says which ran. A pass that fails to be offered (the
package's `graph_passes()` raises, or returns something that is no graph pass) is left out with its
reason, as a kernel that fails to load leaves its layer on PyTorch.

    offered = kernel_graph_passes(model)
    offered.passes      # [KernelGraphPass(kernel="_quantized_linear_cpu_...", name="SiblingLinears", ...)]
    offered.left_out    # ["_x_cpu_...: graph_passes() raised ValueError: ..."]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.layer_forwards import installed_forward, kernel_id_of, kernel_module

if TYPE_CHECKING:
    from torch import nn


@dataclass(frozen=True)
class KernelGraphPass:
    """One graph pass and the kernel (its loaded package's name) that offered it."""

    kernel: str
    name: str
    graph_pass: Any

    def __str__(self) -> str:
        return f"{self.name} ({self.kernel})"


@dataclass
class OfferedPasses:
    """What the kernels in a model offered: the passes to apply and the offers left out, with why."""

    passes: list[KernelGraphPass] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def kernel_graph_passes(model: nn.Module) -> OfferedPasses:
    """The graph passes of every kernel package whose layer forward runs in `model` now, once per
    package, in the order the model's modules first use them."""
    from torch._inductor.custom_graph_pass import CustomGraphPass

    offered = OfferedPasses()
    asked: set[str] = set()
    for module in model.modules():
        # kernelize's bound method, or the explorer's fallback wrapper: both name the kernel's
        # plain function `__func__` (kernels reads it too)
        function = getattr(installed_forward(module), "__func__", None)
        package = kernel_module(kernel_id_of(function)) if function is not None else None
        if package is None or package.__name__ in asked:
            continue
        asked.add(package.__name__)
        offer = getattr(package, "graph_passes", None)
        if offer is None:
            continue
        try:
            passes = list(offer())
        except Exception as error:  # a stranger's code: its failure leaves its passes out, nothing else
            offered.left_out.append(
                f"{package.__name__}: graph_passes() raised {type(error).__name__}: {error}"
            )
            continue
        for graph_pass in passes:
            if not isinstance(graph_pass, CustomGraphPass):
                offered.left_out.append(
                    f"{package.__name__}: graph_passes() gave {type(graph_pass).__name__}, not an Inductor "
                    "CustomGraphPass"
                )
                continue
            offered.passes.append(KernelGraphPass(package.__name__, type(graph_pass).__name__, graph_pass))
    return offered
