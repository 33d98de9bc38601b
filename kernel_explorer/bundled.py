"""The bundled CPU kernel hub as a `kernels` mapping: which layer of which repository replaces
which Transformers layer name.

The mapping has the exact form `use_kernel_mapping` / `register_kernel_mapping` take, with
`LocalLayerRepository` entries pointing at the built repositories, so `kernelize` loads them through
`kernels`' own loader like any Hub kernel.
"""

from __future__ import annotations

from typing import Any

from kernel_explorer.builder import build_hub

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


def bundled_mapping(progress: bool = False) -> dict[str, dict[str, Any]]:
    """`{layer_name: {"cpu": LocalLayerRepository}}` for every bundled layer; builds what is missing."""
    from kernels import LocalLayerRepository

    built = {repo.name: repo for repo in build_hub(progress=progress)}
    return {
        layer: {"cpu": LocalLayerRepository(repo_path=built[repo].repo_path, layer_name=cls)}
        for layer, (repo, cls) in BUNDLED_LAYERS.items()
    }
