"""Quantization methods whose kernels Transformers loads from the Hub: the inventory's quantization
row says which repository a model's method would load and what runs on this CPU instead, and what
Transformers does with the default model's GGUF file."""

from __future__ import annotations

import importlib
import inspect

import pytest

from kernel_explorer._backend import quantization_kernels as backend
from kernel_explorer.catalog.door_row import QUANTIZATION
from kernel_explorer.catalog.quantization_kernels import gguf_plan, quantization_rows
from kernel_explorer.loading import tiny_llama


def test_every_repository_is_the_one_transformers_loads() -> None:
    """Each id is read from (or written in) the Transformers module that loads it: a rename upstream
    fails here instead of leaving a stale row."""
    for method in backend.methods():
        source = inspect.getsource(importlib.import_module(method.source))
        named = method.repository in source
        lazily = "lazy_load_kernel(" in source  # the id then comes from Transformers' own table
        assert named or lazily, f"{method.method}: {method.repository} not in {method.source}"
    assert {m.method for m in backend.methods()} >= {"gguf", "mxfp4", "fbgemm_fp8", "eetq", "metal", "fp8"}


def _model_with(config: object) -> object:
    model = tiny_llama()
    model.config.quantization_config = config  # where from_pretrained keeps a quantized model's config
    return model


@pytest.mark.parametrize(
    ("config_class", "kwargs", "method"),
    [
        ("FineGrainedFP8Config", {}, "fp8"),
        ("EetqConfig", {}, "eetq"),
        ("FbgemmFp8Config", {}, "fbgemm_fp8"),
    ],
)
def test_a_method_for_other_devices_says_its_repository_and_what_a_cpu_gets(
    config_class: str, kwargs: dict, method: str
) -> None:
    import transformers

    try:
        config = getattr(transformers, config_class)(**kwargs)
    except Exception as error:  # a config that checks its own packages at construction
        pytest.skip(f"{config_class}: {error}")
    (facts,) = [m for m in backend.methods() if m.method == method]
    (row,) = quantization_rows(_model_with(config), "cpu")
    assert row.kind == QUANTIZATION and row.repository == facts.repository
    assert row.runs == "no kernel here" and facts.on_cpu in row.reason
    assert ", ".join(facts.devices) in row.reason


def test_a_dequantized_checkpoint_runs_pytorch() -> None:
    from transformers import FineGrainedFP8Config

    config = FineGrainedFP8Config(dequantize=True)  # what its quantizer sets on a machine without a GPU
    (row,) = quantization_rows(_model_with(config), "cpu")
    assert row.runs == "PyTorch on dequantized weights" and "dequantize=True" in row.reason


def test_a_model_without_a_hub_quantization_has_no_row() -> None:
    assert quantization_rows(tiny_llama(), "cpu") == []


def _default_gguf() -> str:
    from kernel_explorer.loading import DefaultModelMissingError, default_model_gguf

    try:
        return str(default_model_gguf())
    except DefaultModelMissingError as error:
        pytest.skip(str(error))


def test_the_default_models_gguf_is_dequantized_at_load_and_asks_for_no_kernel() -> None:
    """SmolLM2 is a Llama: not one of the architectures Transformers keeps packed."""
    path = _default_gguf()
    architecture = backend.gguf_architecture(path)
    kept = backend.gguf_kernel_architectures()
    assert architecture == "llama" and architecture not in kept
    plan = gguf_plan(path)
    assert plan.startswith("llama: not one of the architectures") and "asks for no kernel" in plan
    from transformers import GgufConfig

    (row,) = quantization_rows(_model_with(GgufConfig(gguf_file=path)), "cpu")
    assert row.runs == "PyTorch on dequantized weights" and row.repository == ""
    assert row.revision == "v1" and ", ".join(kept) in row.reason


def test_a_packed_architecture_would_ask_for_the_ggml_kernel() -> None:
    kept = backend.gguf_kernel_architectures()
    assert kept and all(backend.gguf_kernel_path(a) for a in kept)
    assert not backend.gguf_kernel_path("llama")


@pytest.mark.slow
def test_loading_the_default_gguf_leaves_the_row_that_says_so() -> None:
    """The real load (about 35 s): Transformers' GGUF quantizer on the default model's file."""
    from pathlib import Path

    from transformers import AutoModelForCausalLM

    path = Path(_default_gguf())
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name)
    (row,) = quantization_rows(model, "cpu")
    assert row.name == "GGUF" and row.runs == "PyTorch on dequantized weights"
    assert backend.gguf_kernel_loaded(model) in (None, False)  # no kernel was asked for
