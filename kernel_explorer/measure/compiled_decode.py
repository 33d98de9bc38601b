"""Greedy decoding under torch.compile with a static KV cache, and the same loop eagerly.

Why a loop of our own: `model.generate` under torch.compile recompiles as Transformers' dynamic
cache grows (a new shape every token) and spends most of a small model's decode step in Python
around the kernels. A static cache gives every decode step the same shapes, so one graph serves
them all and the kernels' custom ops (registered with torch.library, with fake implementations)
run inside it.

    decoder = StaticDecoder(model, max_cache_len=192, compiled=True)
    tokens = decoder.generate(ids, new_tokens=64)    # greedy, (1, prompt + 64) LongTensor
    tokens, logits = decoder.generate_with_logits(ids, 64)  # + the (64, vocab) logits behind them
    decoder.generate(other, 64, compiled_prefill=False)  # a one-off prompt length: eager prefill
    logits = decoder.prefill(ids)                    # a fresh cache, the prompt's last-token logits
    decoder.decode(first, ids.shape[1], 64)          # again from the same cache position
    decoder.compile_s                                # {"prefill 128": 21.3, "decode": 9.8}: first calls
    print(explain_decode(decoder, ids))              # graphs and graph breaks of one decode step
    EagerDecoder(model).generate(ids, 64)            # the loop on Transformers' dynamic cache

`StaticDecoder` holds one `transformers.StaticCache` of `max_cache_len` tokens and one compiled
function (`torch.compile(dynamic=False)`): the prompt's length and the one-token decode step are its
shape buckets, each compiled on its first call (the seconds are kept in `compile_s`) and reused after
(the decode step's cache position is a tensor, so every step runs one graph). Only the last
token's logits are computed (`logits_to_keep=1`, as llama.cpp does), in prefill and decode alike.
`compiled=False` runs the very same loop eagerly. `EagerDecoder` is what eager PyTorch is measured
with: the same loop on the dynamic cache a user's eager model runs (a static cache eagerly attends
over its whole masked length).

`decode` may start again from the same position after one prefill: a static cache's write count is
set back (the slots past it are overwritten, and masked until then), a dynamic cache is cropped back
to it. So decode is timed without the prefill in every call.

The static cache gives SDPA a mask (the cache's unused tail). Through Transformers' flash glue
(a Hub attention repository, or the bundled flash_attn by its flash name) attention runs PyTorch's
SDPA in these graphs: the glue unpads by the mask (data-dependent shapes, a graph break per layer).
The bundled flash_attn's direct `attention_forward` takes a decode step's boolean mask as the op's
key mask, so its decode graph runs the kernel (and reads only the cache's filled part). A prefill's
mask over several queries would send it to SDPA over the whole cache; registered with
`prefill_mask`, a StaticDecoder's prefill has none, and the kernel's causal path runs on the
prompt's keys.
"""

from __future__ import annotations

import contextlib
import time
import types
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from kernel_explorer.measure.graph_passes import OfferedPasses, kernel_graph_passes

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedConfig


def _own_code(method: Callable[..., Any]) -> Callable[..., Any]:
    """The bound `method` over a copy of its code object (what Dynamo keys its graphs on)."""
    func = method.__func__
    own = types.FunctionType(
        func.__code__.replace(), func.__globals__, func.__name__, func.__defaults__, func.__closure__
    )
    return types.MethodType(own, method.__self__)


def _config(model: nn.Module) -> PreTrainedConfig:
    """A Transformers model's config (`nn.Module` types its attributes as `Tensor | Module`)."""
    return cast("PreTrainedConfig", model.config)


#: True while a StaticDecoder runs a prefill: a fresh cache, positions 0..n-1 (see prefill_mask).
#: A module global, not a thread-local: Dynamo guards a global's value (the prefill graph is
#: built with it set, the decode step's without); a model under prefill_mask serves one loop at a time.
_prefill_from_start = False


def prefill_mask(**kwargs: Any) -> torch.Tensor | None:
    """SDPA's mask function (`transformers.masking_utils.sdpa_mask`), except in a StaticDecoder's
    prefill, where it gives no mask: SDPA's causal semantics on the first seqlen_q keys then say
    exactly what the static cache's mask says (the prompt fills positions 0..n-1 of a fresh cache;
    every key after them is masked).

    Why: Transformers cannot skip a static cache's mask (its query offset is a tensor under
    torch.compile), and with a mask over several queries an attention kernel's glue falls back to
    SDPA over the whole cache. Register it for an attention implementation whose function takes the
    kernel's causal path where the mask is None (the bundled flash_attn's `attention_forward`):
    `AttentionMaskInterface.register(name, prefill_mask)`. Outside a StaticDecoder's prefill, and
    for a padding mask, a sliding window or a mask function other than causal, it is `sdpa_mask`.
    """
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    if (
        _prefill_from_start
        and kwargs.get("q_length", 1) > 1
        and kwargs.get("attention_mask") is None
        and kwargs.get("local_size") is None
        and kwargs.get("mask_function") is causal_mask_function
        and kwargs.get("allow_is_causal_skip", True)
    ):
        return None
    return sdpa_mask(**kwargs)


@contextlib.contextmanager
def _from_start() -> Iterator[None]:
    global _prefill_from_start
    _prefill_from_start = True
    try:
        yield
    finally:
        _prefill_from_start = False


_PACKED = "_kernel_packed"  # quantized_linear.layers.PACKED_ATTR


def _without_derived_tensor_guards(guards: list[Any]) -> list[bool]:
    """Which of Dynamo's guards a decoder's graphs keep: all but the tensor checks on its own static
    cache and on the bundled quantized layers' packed weights (`_kernel_packed`).

    Dynamo re-checks every tensor that is not a parameter on each call, even in the steady steps
    that skip the rest (`_steady`): on SmolLM2 ~300 tensors and the module paths to them, ~0.5 ms
    of a 9 ms token. These cannot change under a graph: the cache's tensors are allocated before
    the first compile and only written in place, and a packed weight's shape and dtype follow its
    module's weight, whose guard stays, as do the guards that see a layer switched (its forward,
    the packed tuple's other fields, the int8 passes it reads).
    """
    return [
        not (g.guard_type == "TENSOR_MATCH" and (g.name.startswith("self.cache.") or _PACKED in g.name))
        for g in guards
    ]


class _GreedyLoop:
    """What both decoders share: greedy steps after a prefill, with or without their logits."""

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        """A fresh cache holding the prompt (batch 1); the last token's logits (1, vocab)."""
        raise NotImplementedError

    def _step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        """One token (1, 1) at cache `position`: its logits (1, vocab)."""
        raise NotImplementedError

    def _rewind(self, start: int) -> None:
        """The cache back to its first `start` positions (what a new decode from `start` needs)."""

    def _steady(self) -> contextlib.AbstractContextManager[None]:
        """What each step after a decode's first runs under (nothing here)."""
        return contextlib.nullcontext()

    def decode(
        self, first: torch.Tensor, start: int, new_tokens: int, logits: list[torch.Tensor] | None = None
    ) -> list[int]:
        """Greedy steps from the token `first` (1, 1) at cache position `start`: `new_tokens` ids
        (`first` included); each step's logits are appended to `logits` when given."""
        import torch

        self._rewind(start)
        out = []
        token = first
        with torch.no_grad():
            for i in range(new_tokens):
                out.append(int(token))
                if i == new_tokens - 1:
                    break
                with self._steady() if i else contextlib.nullcontext():
                    step = self._step(token, start + i)
                if logits is not None:
                    logits.append(step)
                token = step.argmax(-1, keepdim=True)
        return out

    def generate_with_logits(
        self, input_ids: torch.Tensor, new_tokens: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Greedy generation of `new_tokens` after the prompt: (1, prompt + new_tokens) ids, and the
        (new_tokens, vocab) logits each generated token was chosen from."""
        import torch

        logits = [self.prefill(input_ids)]
        ids = self.decode(logits[0].argmax(-1, keepdim=True), input_ids.shape[1], new_tokens, logits)
        return torch.cat([input_ids, torch.tensor([ids])], dim=1), torch.cat(logits)


class StaticDecoder(_GreedyLoop):
    """Greedy prefill/decode of a causal LM with a static KV cache, compiled once per shape bucket
    (or eager with `compiled=False`)."""

    def __init__(
        self,
        model: nn.Module,
        max_cache_len: int,
        *,
        compiled: bool = True,
        cpp_wrapper: bool = False,
        graph_passes: bool = True,
    ) -> None:
        """`graph_passes`: compile with the Inductor passes the model's kernels offer for their own
        ops (`measure/graph_passes.py`; `self.graph_passes` lists them, `self.passes_left_out` the
        offers refused). The bundled quantized_linear's batches a layer's q, k and v (and gate and
        up) into one call: SmolLM2-135M's decode step from 531 kernel calls to 441. The outputs are
        bitwise those of the calls it batches.

        `cpp_wrapper`: Inductor calls the graph's kernels from generated C++ instead of its Python
        wrapper. Off by default: on SmolLM2-135M's decode step (~530 kernel calls, "graph dispatch
        and guards" ~21% of a 8-9 ms token in `bench/decode_anchor.py`'s breakdown) it read no
        faster against llama.cpp (1.07x either way, torch 2.13, Zen 4), the dispatch share stayed,
        and each bucket's first compile took ~20x longer (478-532 s against 21-26 s on 2 cores).
        Kept to check that again on another torch or host (`decode_anchor.py --cpp-wrapper`)."""
        import torch
        from transformers import StaticCache

        # Dynamo keeps its graphs on the code object, guarded on the instance and its model: on
        # this class's shared _forward every bucket of every decoder ever made would be one entry,
        # never freed, and past the recompile limit (8) every later call runs eagerly without a
        # word. A copy of the code per decoder keeps its graphs its own, and lets them go with it.
        # Frames past a graph break (Transformers' code, shared) still add up: hence the limits.
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        torch._dynamo.config.accumulated_recompile_limit = max(
            torch._dynamo.config.accumulated_recompile_limit, 256
        )
        self.model = model
        self.max_cache_len = max_cache_len
        self.compiled = compiled
        self.cache = StaticCache(config=_config(model), max_cache_len=max_cache_len)
        offered = kernel_graph_passes(model) if compiled and graph_passes else OfferedPasses()
        self.graph_passes = offered.passes
        self.passes_left_out = offered.left_out
        # Inductor's Python wrapper checks the size and stride of every input and every custom op's
        # output on each call: ~900 checks in SmolLM2's decode step (576 inputs, 300 kernel calls),
        # ~0.75 ms of an 11 ms token. The shapes are fixed per bucket and Dynamo's guards have
        # checked the inputs already, so these graphs are built without them.
        options: dict[str, Any] = {  # Any: torch types the options' values narrower than Inductor takes
            "size_asserts": False,
            "guard_filter_fn": _without_derived_tensor_guards,
            "cpp_wrapper": cpp_wrapper,
            "post_grad_custom_post_pass": [p.graph_pass for p in self.graph_passes] or None,
        }
        self._fn = (
            torch.compile(_own_code(self._forward), dynamic=False, options=options)
            if compiled
            else self._forward
        )
        self.compile_s: dict[str, float] = {}

    def _forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        out = self.model(
            input_ids=input_ids,
            position_ids=cache_position.unsqueeze(0),
            cache_position=cache_position,
            past_key_values=self.cache,
            use_cache=True,
            logits_to_keep=1,
        )
        return out.logits[:, -1, :]

    def _call(self, bucket: str, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        if self.compiled and bucket not in self.compile_s:
            start = time.perf_counter()
            logits = self._fn(input_ids, cache_position)
            self.compile_s[bucket] = time.perf_counter() - start
            return logits
        return self._fn(input_ids, cache_position)

    def prefill(self, input_ids: torch.Tensor, *, compiled: bool = True) -> torch.Tensor:
        """A fresh cache holding the prompt (batch 1); the last token's logits (1, vocab).
        `compiled=False` runs this prompt's forward eagerly (no graph for a one-off length) into
        the same cache, so the compiled decode step that follows is the one already built."""
        import torch

        n = input_ids.shape[1]
        if n > self.max_cache_len:
            raise ValueError(f"a prompt of {n} tokens does not fit a cache of {self.max_cache_len}")
        with torch.no_grad():
            if not any(getattr(layer, "is_initialized", False) for layer in self.cache.layers):
                # the cache allocates its tensors at its first write: traced, that graph would hold
                # for the first call only (the next finds them allocated and compiles again)
                self._forward(input_ids[:, :1], torch.arange(1))
            self.cache.reset()
            with _from_start():
                if not compiled:
                    return self._forward(input_ids, torch.arange(n))
                return self._call(f"prefill {n}", input_ids, torch.arange(n))

    def _step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        import torch

        return self._call("decode", token, torch.tensor([position]))

    def _steady(self) -> contextlib.AbstractContextManager[None]:
        """Compiled, the steps after a decode's first skip Dynamo's guards but those that tell its
        graphs apart (the prompt buckets from the step): the first step checked them all, and
        nothing a guard watches (the model, its switched forwards, the cache) changes inside one
        decode. On SmolLM2 the guards cost ~1 ms of a 25 ms step (1 thread)."""
        import torch

        if not self.compiled:
            return contextlib.nullcontext()
        return torch.compiler.set_stance(skip_guard_eval_unsafe=True)

    def _rewind(self, start: int) -> None:
        """Each layer writes at its own count of tokens (a tensor, changed in place: the compiled
        graphs hold its address); set back to `start`, the next step overwrites the slots after it,
        and the causal mask hides the ones further on."""
        layers: list[Any] = [layer for layer in self.cache.layers if getattr(layer, "is_initialized", False)]
        if any(getattr(layer, "is_sliding", False) for layer in layers):
            raise ValueError(
                "a sliding-window cache cannot decode again from an earlier position: prefill again"
            )
        for layer in layers:
            layer.cumulative_length.fill_(start)

    def decode(
        self, first: torch.Tensor, start: int, new_tokens: int, logits: list[torch.Tensor] | None = None
    ) -> list[int]:
        if start + new_tokens > self.max_cache_len:
            raise ValueError(f"{start} + {new_tokens} tokens overflow a cache of {self.max_cache_len}")
        return super().decode(first, start, new_tokens, logits)

    def generate(
        self, input_ids: torch.Tensor, new_tokens: int, *, compiled_prefill: bool = True
    ) -> torch.Tensor:
        """Greedy generation of `new_tokens` after the prompt: (1, prompt + new_tokens)."""
        import torch

        first = self.prefill(input_ids, compiled=compiled_prefill).argmax(-1, keepdim=True)
        ids = self.decode(first, input_ids.shape[1], new_tokens)
        return torch.cat([input_ids, torch.tensor([ids])], dim=1)


class EagerDecoder(_GreedyLoop):
    """The same greedy loop, uncompiled, on Transformers' dynamic cache (what eager PyTorch runs)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.cache: Any = None

    def _forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=input_ids, past_key_values=self.cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1, :]

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        import torch
        from transformers import DynamicCache

        self.cache = DynamicCache(config=_config(self.model))
        with torch.no_grad():
            return self._forward(input_ids)

    def _step(self, token: torch.Tensor, position: int) -> torch.Tensor:
        return self._forward(token)

    def _rewind(self, start: int) -> None:
        extra = self.cache.get_seq_length() - start
        if extra > 0:  # crop takes how many tokens to drop, as a negative number
            self.cache.crop(-extra)

    def generate(self, input_ids: torch.Tensor, new_tokens: int) -> torch.Tensor:
        """Greedy generation of `new_tokens` after the prompt: (1, prompt + new_tokens)."""
        return self.generate_with_logits(input_ids, new_tokens)[0]


def explain_decode(decoder: StaticDecoder, input_ids: torch.Tensor) -> str:
    """`torch._dynamo.explain` of one decode step after the prompt: graphs, graph breaks and their
    reasons, in a few lines."""
    import torch

    decoder.prefill(input_ids, compiled=False)  # the prompt eagerly: explain traces the decode step
    token = input_ids[:, -1:]
    with torch.no_grad():
        explanation = torch._dynamo.explain(decoder._forward)(token, torch.tensor([input_ids.shape[1]]))
    lines = [
        f"decode step: {explanation.graph_count} graph(s), {explanation.graph_break_count} graph break(s), "
        f"{explanation.op_count} ops"
    ]
    seen: set[str] = set()
    for br in explanation.break_reasons:
        frame = br.user_stack[-1] if br.user_stack else None
        where = f"{frame.filename.rsplit('/', 2)[-1]}:{frame.lineno}" if frame is not None else "?"
        line = f"  break: {br.reason.splitlines()[0][:160]} at {where}"
        if line not in seen:
            seen.add(line)
            lines.append(line)
    return "\n".join(lines)
