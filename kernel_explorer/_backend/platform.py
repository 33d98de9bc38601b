"""Which backend `kernels` selects here, and which variant strings it accepts."""

from __future__ import annotations


def selected_backend(backend: str | None = None) -> str:
    """The backend variant string `kernels` selects (`"cpu"`, `"cu128"`, ...); None: the torch build's."""
    from kernels.backends import _select_backend

    return _select_backend(backend).variant_str


def accepted_of(candidates: list[str], backend: str | None = None) -> tuple[str, ...]:
    """The variant strings among `candidates` that `kernels`' resolver accepts, most preferred first."""
    from kernels.variants import VariantAccepted, parse_variant, resolve_variants

    variants = [parse_variant(c) for c in dict.fromkeys(candidates)]
    _, trace = resolve_variants(variants, backend)
    return tuple(d.variant.variant_str for d in trace if isinstance(d, VariantAccepted))
