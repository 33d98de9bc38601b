"""What `kernels` itself says a model runs (`get_kernelized_layers`, kernels 0.18+), in the explorer's terms.

The explorer tells what runs by reading each forward back to its loaded kernel; kernels tells it by
the repository `kernelize` recorded on the module (`_kernel_repo`) and on each function layer a
module holds. Two readings of one model: `kernelized_by_kernels` gives kernels' one as
`{(layer name, instance): repository}`, repository spelled as the explorer's `RunningNow` spells
it (a Hub repo id, or a local repository's folder), so a test or a user can hold them side by side.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kernel_explorer._backend.repositories import hub_coordinates, local_path

if TYPE_CHECKING:
    from torch import nn

#: why there is no kernels' view on this release (one line)
NO_VIEW = "kernels before 0.18 has no get_kernelized_layers: kernels' own view of what runs is not available"


def has_kernels_view() -> bool:
    """Whether the installed `kernels` says what a model runs (`get_kernelized_layers`, 0.18+)."""
    import kernels

    return hasattr(kernels, "get_kernelized_layers")


def repository_name(repository: Any) -> str:
    """A repository object as `RunningNow.repository` names it: Hub repo id, or the local folder."""
    hub = hub_coordinates(repository)
    if hub is not None:
        return hub.repo_id
    path = local_path(repository)
    return str(path) if path is not None else str(repository)


def kernelized_by_kernels(model: nn.Module) -> dict[tuple[str, str], str] | None:
    """kernels' own word on what `model` runs: `{(layer name, instance): repository}`; None before 0.18.

    Layer forwards are keyed by their class's kernel layer name and module path; function layers
    (`use_kernelized_func`) by their layer name and the path of the module that holds them.
    """
    if not has_kernels_view():
        return None
    from kernels import get_kernelized_layers

    found = get_kernelized_layers(model)
    view: dict[tuple[str, str], str] = {}
    for path, layer in found.layers.items():
        name = getattr(type(layer.module), "kernel_layer_name", type(layer.module).__name__)
        view[(str(name), path)] = repository_name(layer.repo)
    for (holder, key), func in found.funcs.items():
        name = getattr(type(func.module), "kernel_layer_name", key)
        view[(str(name), holder)] = repository_name(func.repo)
    return view
