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
from kernel_explorer.cache import cache_root

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

#: bundled repositories that serve no kernelize layer: attention kernels enter a model through
#: Transformers' attention interface (`attn_implementation`), not through a layer mapping
BUNDLED_ATTENTION_REPOS: tuple[str, ...] = ("flash_attn",)

#: the bundled repositories (folders of hub/): those the layers serve, and the attention ones
BUNDLED_REPOS: tuple[str, ...] = tuple(
    sorted({repo for repo, _ in BUNDLED_LAYERS.values()} | set(BUNDLED_ATTENTION_REPOS))
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
