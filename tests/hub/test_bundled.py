"""The bundled hub switched into real models through kernels' own kernelize + LocalLayerRepository."""

from __future__ import annotations

import pytest
import torch
from kernels import Mode, kernelize, use_kernel_mapping

from kernel_explorer.build.bundled import BUNDLED_LAYERS, bundled_mapping
from kernel_explorer.inspect.layer_groups import find_kernel_layers
from kernel_explorer.loading import tiny_gpt2, tiny_llama


@pytest.fixture(scope="module")
def mapping(hub: dict) -> dict:
    return bundled_mapping()


@pytest.fixture(autouse=True)
def _restore_shared_function_layers():
    """kernelize switches a `use_kernelized_func` layer on the ONE module object that every
    attention instance (and Transformers' module-level function) shares; undo it after each test."""
    yield
    from transformers.models.llama import modeling_llama

    vars(modeling_llama.apply_rotary_pos_emb).pop("forward", None)


def _kernelize(model: torch.nn.Module, mapping: dict) -> torch.nn.Module:
    with use_kernel_mapping(mapping, inherit_mapping=False):
        return kernelize(model, mode=Mode.INFERENCE, device="cpu")


def _runs_bundled_kernel(module: torch.nn.Module) -> bool:
    forward = module.__dict__.get("forward")
    return (
        forward is not None and forward.__func__.__module__.startswith("_") and "_cpu_" in forward.__module__
    )


@pytest.mark.parametrize("factory", [tiny_llama, tiny_gpt2])
def test_every_kernel_layer_of_the_tiny_models_is_switched(mapping: dict, factory) -> None:
    model = factory()
    ids = torch.randint(0, 256, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        eager = model(ids).logits
        _kernelize(model, mapping)
        kernel = model(ids).logits
    for group in find_kernel_layers(model):
        assert group.name in BUNDLED_LAYERS
        for path in group.instances:
            module = model.get_submodule(path)
            target = module._kernel_funcs[group.name] if group.kind == "function" else module
            assert _runs_bundled_kernel(target), f"{group.name} at {path} still runs PyTorch"
    torch.testing.assert_close(kernel, eager)


def test_bfloat16_tiny_llama(mapping: dict) -> None:
    model = tiny_llama().to(torch.bfloat16)
    ids = torch.randint(0, 256, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        eager = model(ids).logits
        kernel = _kernelize(model, mapping)(ids).logits
    torch.testing.assert_close(kernel, eager, rtol=2e-2, atol=2e-2)


@pytest.mark.slow
def test_smollm2_greedy_answer_is_unchanged(mapping: dict) -> None:
    from kernel_explorer.loading import load_default_model

    model, tokenizer = load_default_model(progress=False)
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt")[
        "input_ids"
    ]
    with torch.inference_mode():
        eager = model.generate(ids, max_new_tokens=24, do_sample=False)
        _kernelize(model, mapping)
        switched = sum(len(g) for g in find_kernel_layers(model))
        kernel = model.generate(ids, max_new_tokens=24, do_sample=False)
    assert switched == 121
    assert torch.equal(kernel, eager), tokenizer.decode(kernel[0])
    assert "Paris" in tokenizer.decode(kernel[0, ids.shape[1] :])


TRAINING_AND_COMPILE_MODES = [
    Mode.TRAINING,
    Mode.INFERENCE | Mode.TORCH_COMPILE,
    Mode.TRAINING | Mode.TORCH_COMPILE,
]


def _assert_every_layer_runs_a_kernel(model: torch.nn.Module) -> None:
    for group in find_kernel_layers(model):
        for path in group.instances:
            module = model.get_submodule(path)
            target = module._kernel_funcs[group.name] if group.kind == "function" else module
            assert _runs_bundled_kernel(target), f"{group.name} at {path} still runs PyTorch"


@pytest.mark.parametrize("mode", TRAINING_AND_COMPILE_MODES, ids=str)
@pytest.mark.parametrize("factory", [tiny_llama, tiny_gpt2])
def test_kernelize_picks_the_bundled_kernels_in_training_and_compile_modes(
    mapping: dict, factory, mode
) -> None:
    """Every bundled layer class declares has_backward and can_torch_compile, so kernels' own
    mode check keeps the kernel (with either flag missing it silently falls back to PyTorch)."""
    for name, entry in mapping.items():
        layer = entry["cpu"].load()  # the layer class, as kernelize loads it
        assert layer.has_backward is True and layer.can_torch_compile is True, name
    model = factory()
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=mode, device="cpu")
    _assert_every_layer_runs_a_kernel(model)


def _training_step(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    loss = model(ids, labels=ids).loss
    loss.backward()
    return loss.detach(), {name: p.grad for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("factory", [tiny_llama, tiny_gpt2])
def test_training_step_with_kernels_matches_pytorch(mapping: dict, factory) -> None:
    """Mode.TRAINING: the loss and the gradient of every parameter agree with PyTorch's (the
    models stay in eval() so that dropout does not differ between the two runs)."""
    ids = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(0))
    eager_loss, eager_grads = _training_step(factory(), ids)
    model = factory()
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.TRAINING, device="cpu")
    _assert_every_layer_runs_a_kernel(model)
    loss, grads = _training_step(model, ids)
    torch.testing.assert_close(loss, eager_loss)
    assert grads.keys() == eager_grads.keys() and len(grads) > 10
    for name, grad in grads.items():
        torch.testing.assert_close(
            grad, eager_grads[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )


def test_compiled_training_step_with_kernels_matches_pytorch(mapping: dict) -> None:
    """Mode.TRAINING | Mode.TORCH_COMPILE: the kernelized model compiles in one graph
    (fullgraph=True) and its compiled training step agrees with eager PyTorch's."""
    ids = torch.randint(0, 256, (2, 13), generator=torch.Generator().manual_seed(0))
    eager_loss, eager_grads = _training_step(tiny_llama(), ids)
    model = tiny_llama()
    with use_kernel_mapping(mapping, inherit_mapping=False):
        kernelize(model, mode=Mode.TRAINING | Mode.TORCH_COMPILE, device="cpu")
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    loss, grads = _training_step(compiled, ids)
    torch.testing.assert_close(loss, eager_loss)
    for name, grad in grads.items():
        name = name.removeprefix("_orig_mod.")
        torch.testing.assert_close(
            grad, eager_grads[name], rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"{n}: {m}"
        )


def test_extension_candidates_are_keyed_by_class_and_wait_for_their_sources() -> None:
    from torch import nn

    from kernel_explorer.build.bundled import BUNDLED_REPOS, extension_mappings, hub_sources

    class SameForward(nn.Linear):
        pass

    class OwnForward(nn.Linear):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            return super().forward(input) * 2

    assert extension_mappings("Linear", nn.LayerNorm) == []
    assert extension_mappings("Dense", OwnForward) == []  # another forward: the kernel may not fit
    if not (hub_sources() / "quantized_linear").is_dir():  # this checkout does not bundle it (yet)
        assert "quantized_linear" not in BUNDLED_REPOS and extension_mappings("Dense", SameForward) == []
        return
    assert "quantized_linear" in BUNDLED_REPOS
    found = extension_mappings("Dense", SameForward)
    assert [m["Dense"]["cpu"].layer_name for m in found] == ["Q8_0Linear", "Q4_1Linear"]
