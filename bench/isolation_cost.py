"""What isolation costs: `inventory()` seconds with a stranger's candidate tried in the worker
process first (switching/isolation.py) and without (every trial in this process, as before).

For each model, two fresh processes (so neither inherits the other's imports, loaded kernels or
cached verdicts), each: build the model, `Explorer(model, peers=[a correct pure-Python RMSNorm
peer])` (the peer's classes are read in the worker: the worker starts here), `capture()` 32
tokens, then time the first `inventory()` (every candidate tried) and a second one (verdicts
cached). Models: the default model (SmolLM2-135M, float32) and a random Llama of SmolLM2-1.7B's
shapes in bfloat16 (24 layers, hidden 2048, 32 heads, vocabulary 49152).

    python bench/isolation_cost.py            # both models
    python bench/isolation_cost.py --quick    # the default model only
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PEER_LAYERS = """
import torch
from torch import nn


class RMSNorm(nn.Module):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        x = hidden_states.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)
        return self.weight * x.to(hidden_states.dtype)
"""


def write_peer(root: Path) -> Path:
    """A built, pure-Python kernel repository with one RMSNorm layer (what a peer looks like)."""
    build = root / "bench-peer-rmsnorm" / "build" / "torch-cpu"
    build.mkdir(parents=True, exist_ok=True)
    metadata = {"id": "_bench_peer_rmsnorm", "name": "bench-peer-rmsnorm", "version": 1,
                "license": "apache-2.0", "python-depends": [], "backend": {"type": "cpu"}}  # fmt: skip
    (build / "metadata.json").write_text(json.dumps(metadata))
    (build / "__init__.py").write_text("from . import layers\n")
    (build / "layers.py").write_text(PEER_LAYERS)
    return root / "bench-peer-rmsnorm"


def build_model(name: str):  # type: ignore[no-untyped-def]
    import torch

    if name == "default":
        from kernel_explorer import load_default_model

        return load_default_model(progress=False)[0]
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
        num_key_value_heads=32, vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    with torch.device("cpu"):
        model = LlamaForCausalLM(config).to(torch.bfloat16)
    return model.eval()


def one_run(model_name: str, isolated: bool, peer: Path) -> dict[str, float]:
    """In a fresh process: the figures of one model with isolation on or off."""
    import torch

    from kernel_explorer import Explorer
    from kernel_explorer.switching import isolation

    isolation.ENABLED = isolated
    start = time.perf_counter()
    model = build_model(model_name)
    built = time.perf_counter() - start
    start = time.perf_counter()
    explorer = Explorer(model, peers=[peer])
    construct = time.perf_counter() - start
    explorer.capture({"input_ids": torch.arange(1, 33)[None] % model.config.vocab_size})
    start = time.perf_counter()
    explorer.inventory()
    first = time.perf_counter() - start
    start = time.perf_counter()
    explorer.inventory()
    second = time.perf_counter() - start
    return {"model_s": built, "explorer_s": construct, "inventory_s": first, "again_s": second}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(one_run(sys.argv[2], sys.argv[3] == "on", Path(sys.argv[4]))))
        return
    import torch

    models = ["default"] if "--quick" in sys.argv else ["default", "1.7b"]
    print(f"torch threads {torch.get_num_threads()}; {sys.executable}")
    with tempfile.TemporaryDirectory() as folder:
        peer = write_peer(Path(folder))
        for name in models:
            figures = {}
            for mode in ("off", "on"):
                done = subprocess.run(
                    [sys.executable, __file__, "--one", name, mode, str(peer)],
                    capture_output=True, text=True, check=True,
                )  # fmt: skip
                figures[mode] = json.loads(done.stdout.strip().splitlines()[-1])
            off, on = figures["off"], figures["on"]
            extra = on["explorer_s"] + on["inventory_s"] - off["explorer_s"] - off["inventory_s"]
            print(
                f"{name}: Explorer(peers=[...]) {off['explorer_s']:.2f} s -> {on['explorer_s']:.2f} s; "
                f"first inventory() {off['inventory_s']:.2f} s -> {on['inventory_s']:.2f} s "
                f"(+{on['inventory_s'] - off['inventory_s']:.2f} s); again {off['again_s']:.2f} s -> "
                f"{on['again_s']:.2f} s; together +{extra:.2f} s"
                f" (model built in {on['model_s']:.0f} s)"
            )


if __name__ == "__main__":
    main()
