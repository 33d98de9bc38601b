"""The bundled CPU kernel hub: the one registry of its repositories, and its `kernels` mapping.

The mapping has the exact form `use_kernel_mapping` / `register_kernel_mapping` take, with
`LocalLayerRepository` entries pointing at where `build_hub` puts the built repositories, so
`kernelize` loads them through `kernels`' own loader like any Hub kernel. Reading the mapping never
compiles: a repository that is not built yet reads "no build for this machine" with the command
that builds it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernel_explorer._backend.repositories import local_layer_repository
from kernel_explorer.build.cache import cache_root

# Transformers layer name -> (bundled repository, layer class in its layers.py)
BUNDLED_LAYERS: dict[str, tuple[str, str]] = {
    "RMSNorm": ("rmsnorm", "RMSNorm"),
    "SiLU": ("activation", "Silu"),
    "GeLU": ("activation", "Gelu"),
    "GeluTanh": ("activation", "GeluTanh"),
    "NewGELU": ("activation", "NewGELU"),
    "FastGELU": ("activation", "FastGELU"),
    "QuickGELU": ("activation", "QuickGELU"),
    "rotary_pos_emb": ("rotary", "apply_rotary_transformers"),
}

#: Kernels for layers the model does not mark (see `extension.py`), keyed by the class they fit
#: (its qualified name): (bundled repository, layer class) in order of preference. The layer name is
#: the user's choice when they extend, so these are mapped under that name then.
BUNDLED_EXTENSIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "torch.nn.modules.linear.Linear": (
        ("quantized_linear", "Q8_0Linear"),
        ("quantized_linear", "Q4_1Linear"),
    ),
}


def hub_sources() -> Path:
    """The bundled repositories' sources: `hub/` beside the package in a checkout, else package data.

    The checkout's own `hub/` comes first: under an editable install the package-data mapping
    points at the installed checkout, which is the wrong tree when this package is imported from
    another one (a git worktree put first on PYTHONPATH).
    """
    from importlib import resources

    checkout = Path(__file__).resolve().parents[2] / "hub"
    if (checkout / "common" / "csrc").is_dir():
        return checkout
    try:
        return Path(str(resources.files("kernel_explorer.hub")))
    except ModuleNotFoundError:
        return Path(__file__).resolve().parents[2] / "hub"


def _has_sources(name: str) -> bool:
    return (hub_sources() / name).is_dir()


#: the bundled CPU attention repository (flash-attn 2's call contract), entered through Transformers'
#: attention interface, not a layer mapping (see attention.py); absent until built, like any other
BUNDLED_ATTENTION = "flash_attn"

#: the bundled repositories (folders of hub/), derived from the layers they serve; an extension
#: repository counts once its sources are there (a checkout without it builds and runs the rest)
BUNDLED_REPOS: tuple[str, ...] = tuple(
    sorted(
        {repo for repo, _ in BUNDLED_LAYERS.values()}
        | {repo for pairs in BUNDLED_EXTENSIONS.values() for repo, _ in pairs if _has_sources(repo)}
        | ({BUNDLED_ATTENTION} if _has_sources(BUNDLED_ATTENTION) else set())
    )
)

BUILD_HINT = "build it with `kernel-explorer build-hub` (or kernel_explorer.build_hub())"


def bundled_repo_path(name: str) -> Path:
    """Where the built repository `name` lies (what `LocalLayerRepository` takes), built or not."""
    return cache_root() / "hub" / name


def bundled_mapping() -> dict[str, dict[str, Any]]:
    """`{layer_name: {"cpu": LocalLayerRepository}}` for every bundled layer (nothing is built here)."""
    return {
        layer: {"cpu": local_layer_repository(bundled_repo_path(repo), cls)}
        for layer, (repo, cls) in BUNDLED_LAYERS.items()
    }


def _qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def extension_mappings(layer_name: str, cls: type) -> list[dict[str, dict[str, Any]]]:
    """Bundled candidates for a class the user extends under `layer_name`, one mapping each.

    Each is `{layer_name: {"cpu": LocalLayerRepository}}` (the form `use_kernel_mapping` takes),
    in order of preference. A class fits a registered one when it is that class or a subclass that
    keeps its forward. Empty when no bundled repository serves `cls`, or its repository is not
    part of this checkout.
    """
    for base in cls.__mro__:
        pairs = BUNDLED_EXTENSIONS.get(_qualname(base))
        if pairs is None:
            continue
        if getattr(cls, "forward", None) is not getattr(base, "forward", None):
            return []
        return [
            {layer_name: {"cpu": local_layer_repository(bundled_repo_path(repo), layer)}}
            for repo, layer in pairs
            if repo in BUNDLED_REPOS
        ]
    return []
