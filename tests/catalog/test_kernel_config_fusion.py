"""KernelConfig keys that fuse sibling modules (a tuple) and `inherit_mapping=False`: inventory rows
that say which modules would be fused, why the explorer cannot do it on this CPU and what it needs,
instead of a warning or silence."""

from __future__ import annotations

import warnings

from kernel_explorer.catalog.door_row import KERNEL_CONFIG
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama


def _fused(key: tuple, spec: object = "org/fused:FusedNormLinear", **kwargs: object) -> object:
    from transformers import KernelConfig

    return KernelConfig({key: spec}, **kwargs)


def _rows(config: object, model: object | None = None) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Transformers' refusal of "cpu" is the other test's business
        explorer = Explorer(model or tiny_llama(), mapping=config, include_bundled=False)
    return [d for d in explorer.inventory().doors if d.kind == KERNEL_CONFIG]


def test_a_tuple_key_says_which_modules_would_be_fused_and_why_not_here() -> None:
    model = tiny_llama()
    layers = len(model.model.layers)
    key = (("RMSNorm", "model.layers.*.post_attention_layernorm"), ("MLP", "model.layers.*.mlp"))
    (row,) = _rows(_fused(key), model)
    assert row.name == "model.layers.*.{post_attention_layernorm, mlp}"
    assert row.instances == layers and f"({layers} modules of this model match)" in row.reason
    assert "FusedNormLinearLayout in place of post_attention_layernorm and nn.Identity for mlp" in row.reason
    assert "before it is built" in row.reason and row.runs == "not fused here"
    assert "refuses 'cpu'" in row.reason  # Transformers' KernelConfig devices
    assert row.repository == "org/fused"


def test_a_tuple_key_matching_nothing_or_two_parents_is_what_transformers_would_refuse() -> None:
    (nothing,) = _rows(_fused((("A", "encoder.blocks.*.a"), ("B", "encoder.blocks.*.b"))))
    assert nothing.runs == "no module matches" and "no module of this model matches" in nothing.reason
    (apart,) = _rows(_fused((("A", "model.layers.*.mlp"), ("B", "model.norm.weight"))))
    assert apart.runs == "refused by Transformers" and "different parents" in apart.reason
    (lacking,) = _rows(_fused((("A", "model.layers.*.mlp"), ("B", "model.layers.*.no_such_child"))))
    assert "Transformers would refuse it: model.layers.0.no_such_child" in lacking.reason
    (malformed,) = _rows(_fused(("gate_proj", "up_proj")))
    assert malformed.runs == "refused by Transformers" and "reads a fused key as" in malformed.reason


def test_the_string_keys_are_still_explored_beside_a_fusion(hub: dict) -> None:
    from pathlib import Path

    from transformers import KernelConfig

    rmsnorm = Path(hub["rmsnorm"].__file__).parents[2]
    key = (("RMSNorm", "model.layers.*.input_layernorm"), ("Attention", "model.layers.*.self_attn"))
    config = KernelConfig({"RMSNorm": f"{rmsnorm}:RMSNorm", key: f"{rmsnorm}:RMSNorm"}, use_local_kernel=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explorer = Explorer(tiny_llama(), mapping=config, include_bundled=False, include_transformers=False)
    assert not any("fusion" in str(w.message) for w in caught)  # a row now, not a warning
    row = explorer.inventory().row("RMSNorm")
    assert [c.source for c, _ in row.candidates][:1] == ["user"]
    rows = {d.name: d for d in explorer.inventory().doors if d.kind == KERNEL_CONFIG}
    assert "model.layers.*.{input_layernorm, self_attn}" in rows
    hidden = rows["inherit_mapping=False"]  # use_local_kernel hides the other mappings too
    assert hidden.runs == "only this config's 1 layer" and "use_local_kernel=True" in hidden.reason


def test_inherit_mapping_false_says_the_other_mappings_are_hidden() -> None:
    from transformers import KernelConfig

    (row,) = _rows(KernelConfig({"RMSNorm": "org/norm:RMSNorm"}, inherit_mapping=False))
    assert row.name == "inherit_mapping=False" and "inherit_mapping=False:" in row.reason
    assert "default mapping" in row.reason
    assert _rows(KernelConfig({"RMSNorm": "org/norm:RMSNorm"})) == []  # inherited: nothing to say
