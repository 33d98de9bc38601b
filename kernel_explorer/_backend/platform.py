"""Which backend `kernels` selects here, and which variant strings it accepts."""

from __future__ import annotations

from typing import Any

from kernel_explorer._backend.internals import internal


def selected_backend(backend: str | None = None) -> str:
    """The backend variant string `kernels` selects (`"cpu"`, `"cu128"`, ...); None: the torch build's."""
    _select_backend = internal("kernels.backends", "_select_backend")

    return _select_backend(backend).variant_str


def accepted_of(candidates: list[str], backend: str | None = None) -> tuple[str, ...]:
    """The variant strings among `candidates` that `kernels`' resolver accepts, most preferred first."""
    VariantAccepted = internal("kernels.variants", "VariantAccepted")
    parse_variant = internal("kernels.variants", "parse_variant")
    resolve_variants = internal("kernels.variants", "resolve_variants")

    variants = [parse_variant(c) for c in dict.fromkeys(candidates)]
    _, trace = resolve_variants(variants, backend)
    return tuple(d.variant.variant_str for d in trace if isinstance(d, VariantAccepted))


def ops_without_kernel(kernel_module: Any, dispatch_key: str = "CPU") -> list[str]:
    """Ops a loaded kernel registered (under its metadata id) that have no kernel for `dispatch_key`.

    A registered op with no kernel for a backend is visible without calling it: flash-attn2's CPU
    build defines `fwd` but implements only `varlen_fwd` for the CPU. Composite ops (implemented in
    terms of others) count as implemented.
    """
    import torch

    namespace = _namespace(kernel_module)
    if namespace is None:
        return []
    missing = []
    for qualname in torch._C._dispatch_get_all_op_names():
        if not qualname.startswith(f"{namespace}::"):
            continue
        keys = (dispatch_key, "CompositeImplicitAutograd", "CompositeExplicitAutograd")
        if not any(torch._C._dispatch_has_kernel_for_dispatch_key(qualname, key) for key in keys):
            missing.append(qualname.split("::", 1)[1])
    return sorted(missing)


def _namespace(kernel_module: Any) -> str | None:
    """The op namespace of a loaded kernel module: its `ops` object's namespace, or its package name."""
    ops = getattr(getattr(kernel_module, "_ops", None), "ops", None)
    name = getattr(ops, "name", None)
    if isinstance(name, str) and name:
        return name.removeprefix("torch.ops.").split(".")[0]
    package = getattr(kernel_module, "__name__", "") or ""
    return package.split(".")[0] or None


def version_counter(tensor: Any) -> int:
    """A tensor's version counter (bumped by every in-place change): how the guard sees one."""
    return int(tensor._version)
