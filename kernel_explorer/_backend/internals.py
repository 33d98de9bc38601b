"""Every internal of `kernels` and Transformers this package relies on, checked in one place.

The versions below are the ones the explorer is tested with; when an upgrade moves one of these
names, `missing_internals()` says which one and against which installed version, instead of an
`AttributeError` deep inside a switch. `kernels` 0.18 moved its internal modules under
`kernels._internals`; `module_for` maps the names below (spelled as kernels 0.17 has them) to
where the installed release keeps them, and `internal` imports one from there, so no other module
of the explorer learns a version.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from packaging.version import InvalidVersion, Version

# (distribution, module, attribute): the names the _backend modules import or read. kernels modules
# are spelled as in 0.17; `module_for` gives the installed release's location.
INTERNALS: tuple[tuple[str, str, str], ...] = (
    ("kernels", "kernels.layer.repos", "_MODE_FALLBACK_PRIORITY"),
    ("kernels", "kernels.layer.globals", "_KERNEL_MAPPING"),
    ("kernels", "kernels.layer.layer", "kernelize_layer"),
    ("kernels", "kernels.layer.layer", "_validate_layer"),
    ("kernels", "kernels.layer.kernelize", "_find_device"),
    ("kernels", "kernels.hf_hub", "_get_hf_api"),
    ("kernels", "kernels.backends", "_select_backend"),
    ("kernels", "kernels.variants", "get_variants"),
    ("kernels", "kernels.variants", "get_variants_local"),
    ("kernels", "kernels.variants", "resolve_variant"),
    ("kernels", "kernels.variants", "resolve_variants"),
    ("kernels", "kernels.variants", "parse_variant"),
    ("kernels", "kernels.variants", "variants_trace_str"),
    ("kernels", "kernels.variants", "VariantAccepted"),
    ("kernels", "kernels.variants", "_resolve_variant_for_system"),  # platform: a described machine
    ("kernels", "kernels.backends", "parse_backend"),
    ("kernels", "kernels.archs", "_supports_cuda_capability"),
    ("kernels", "kernels.resolver", "resolve_local_kernel"),
    ("kernels", "kernels._rust", "KernelLocks"),
    ("kernels", "kernels._rust", "Metadata"),  # verification: a build's digest, hashed as kernels does
    ("kernels", "kernels._rust", "Digest"),
    ("kernels", "kernels._rust", "DigestValidationError"),
    ("kernels", "kernels._rust", "DigestViolation"),
    ("transformers", "transformers.integrations.hub_kernels", "get_kernel_mapping_transformers"),
    ("transformers", "transformers.integrations.hub_kernels", "is_kernel"),
    ("transformers", "transformers.integrations.hub_kernels", "get_attn_kernel_version"),
    ("transformers", "transformers.modeling_flash_attention_utils", "FLASH_ATTN_KERNEL_FALLBACK"),
    ("transformers", "transformers.modeling_flash_attention_utils", "FLASH_ATTN_KERNEL_DEVICES"),
    ("transformers", "transformers.modeling_utils", "ALL_ATTENTION_FUNCTIONS"),
    ("transformers", "transformers.utils.generic", "is_flash_attention_requested"),  # attention_features
    ("transformers", "transformers.modeling_flash_attention_utils", "_flash_attention_forward"),
    ("transformers", "transformers.modeling_flash_attention_utils", "_process_flash_attention_kwargs"),
    ("transformers", "transformers.integrations.flash_attention", "flash_attention_forward"),
    ("transformers", "transformers.utils.import_utils", "KERNELS_MIN_VERSION"),
    ("transformers", "transformers.utils.import_utils", "KERNELS_MAX_VERSION"),
    # function kernels with a fallback chain (function_chains)
    ("transformers", "transformers.integrations.hub_kernels", "use_kernel_func_from_hub_with_fallback"),
    ("transformers", "transformers.integrations.hub_kernels", "_PACKAGE_TO_DISTRIBUTION"),
    # flash-attention names resolving to Hub repositories (flash_names)
    ("transformers", "transformers.modeling_flash_attention_utils", "FLASH_ATTN_KERNEL_VERSIONS"),
    # quantization kernels from the Hub (quantization_kernels), the experts' Hub kernels (experts)
    ("transformers", "transformers.integrations.hub_kernels", "_HUB_KERNEL_MAPPING"),
    ("transformers", "transformers.integrations.gguf.reader", "read_gguf_metadata"),
    ("transformers", "transformers.integrations.gguf.utils", "is_gguf_arch_supported"),
    ("transformers", "transformers.integrations.gguf.gguf_conversion_mapping", "GGUF_ARCHS"),
)

# kernels 0.18 moved every internal module but its compiled `_rust` under `kernels._internals`.
_KERNELS_INTERNALS_PACKAGE = "kernels._internals"
_KERNELS_MOVED_IN = Version("0.18")


def module_for(module: str, kernels_version: str | None = None) -> str:
    """Where the installed `kernels` (or `kernels_version`) keeps `module` (spelled as in 0.17).

    Transformers' names and kernels' `_rust` module stay where they are.
    """
    if not module.startswith("kernels.") or module.startswith("kernels._rust"):
        return module
    version = kernels_version if kernels_version is not None else _version("kernels")
    try:
        moved = Version(version) >= _KERNELS_MOVED_IN
    except InvalidVersion:  # "not installed": the import then fails with the reason
        moved = True
    return _KERNELS_INTERNALS_PACKAGE + module.removeprefix("kernels") if moved else module


def internal(module: str, attribute: str) -> Any:
    """`attribute` of `module` (spelled as in `INTERNALS`), from where the installed release keeps it."""
    return getattr(importlib.import_module(module_for(module)), attribute)


# Private attributes read off objects of those libraries (checked by the tests on real objects).
ATTRIBUTES: dict[str, tuple[str, ...]] = {
    "kernels.LayerRepository": ("_repo_id", "_revision", "_version", "_trust_remote_code"),
    "kernels.LocalLayerRepository": ("_repo_path",),
    "kernels' CPU device repos": ("_repos",),  # the mode -> repository dict (mappings._flat_repos)
    "use_kernelized_func holders": ("_kernel_funcs",),
    # what the model's attention and its experts modules run now
    "transformers.PretrainedConfig": ("_attn_implementation", "_experts_implementation"),
    # whether the model can switch; whether it takes flash attention at all (flash_names)
    "transformers.PreTrainedModel": ("_can_set_attn_implementation", "_supports_flash_attn"),
}

# The pairs CI runs: the newest (the full suite) and the oldest still supported (the fast tests).
TESTED_PAIRS: tuple[dict[str, str], ...] = (
    {"kernels": "0.19.1", "transformers": "5.25.0"},
    {"kernels": "0.17.2", "transformers": "5.22.2"},
)


def _tested_with(distribution: str) -> str:
    versions = sorted({pair[distribution] for pair in TESTED_PAIRS}, key=Version)
    return f"{distribution} " + " and ".join(versions)


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def missing_attributes(owner: str, obj: object, *, own: bool = False) -> list[str]:
    """One line per private attribute `ATTRIBUTES[owner]` lists that `obj` lacks (empty when none).

    `own=True` looks in the object's own `__dict__` only (the holders' `_kernel_funcs` is set per
    instance by `use_kernelized_func`, and nothing else tells it is there).
    """
    has = (lambda name: name in vars(obj)) if own else (lambda name: hasattr(obj, name))
    distribution = owner.split(".")[0] if "." in owner else "kernels"
    return [
        f"{owner}.{name}: attribute missing in {distribution} {_version(distribution)} "
        f"(kernel_explorer is tested with {_tested_with(distribution)}); "
        "update kernel_explorer/_backend for this version"
        for name in ATTRIBUTES[owner]
        if not has(name)
    ]


def missing_internals() -> list[str]:
    """One line per internal that is not where this package expects it (empty when all are)."""
    missing = []
    for distribution, module_name, attribute in INTERNALS:
        location = module_for(module_name)
        try:
            module = importlib.import_module(location)
        except ImportError as error:
            found = f"module missing ({error})"
        else:
            if hasattr(module, attribute):
                continue
            found = "name missing"
        missing.append(
            f"{location}.{attribute}: {found} in {distribution} {_version(distribution)} "
            f"(kernel_explorer is tested with {_tested_with(distribution)}); "
            "update kernel_explorer/_backend for this version"
        )
    return missing
