"""What runs, checked against kernels' own word (`get_kernelized_layers`, kernels 0.18+).

The explorer reads each forward back to the loaded kernel it belongs to; kernels reads the
repository `kernelize` recorded on the module. After any sequence of switches (whole layers and
single instances, the bundled kernels and a peer), the two readings must name the same instances
and the same repositories.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_repos import write_noarch_repo

from kernel_explorer._backend.kernelized import NO_VIEW, has_kernels_view, kernelized_by_kernels
from kernel_explorer.build.builder import build_path
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama

needs_view = pytest.mark.skipif(not has_kernels_view(), reason=NO_VIEW)


def _same_place(path: str) -> str:
    """A local repository folder spelled one way (the loader may see it through a symlink)."""
    return str(Path(path).resolve()) if Path(path).is_absolute() else path


def explorer_view(explorer: Explorer) -> dict[tuple[str, str], str]:
    """The explorer's "what runs now" for the layer and function doors, as kernels' view spells it."""
    kinds = {name: group.kind for name, group in explorer._switchboard.groups.items()}
    return {
        (now.layer_name, now.instance): _same_place(str(now.repository))
        for now in explorer.running()
        if now.is_kernel and kinds[now.layer_name] != "attention"
    }


def kernels_view(explorer: Explorer) -> dict[tuple[str, str], str]:
    view = kernelized_by_kernels(explorer.model)
    assert view is not None
    return {key: _same_place(repo) for key, repo in view.items()}


@pytest.fixture(scope="module")
def peer_explorer(tmp_path_factory: pytest.TempPathFactory, hub: dict) -> Explorer:
    # a name of its own: another test builds py-rmsnorm elsewhere, and kernels loads one id once
    source = write_noarch_repo(tmp_path_factory.mktemp("peer") / "kw-rmsnorm", name="kw-rmsnorm")
    explorer = Explorer(tiny_llama(seed=11), peers=[source], include_transformers=False)
    explorer._peer_label = f"peer/{build_path(source).repo_path.name}"  # type: ignore[attr-defined]
    yield explorer
    explorer.reset()


@needs_view
def test_a_switched_model_reads_the_same_to_kernels_and_to_the_explorer(peer_explorer: Explorer) -> None:
    explorer = peer_explorer
    try:
        explorer.on("RMSNorm", candidate=explorer._peer_label)  # type: ignore[attr-defined]
        explorer.on("SiLU")
        explorer.on("rotary_pos_emb", explorer.group("rotary_pos_emb").instances[:1])
        view = kernels_view(explorer)
        assert {layer for layer, _ in view} == {"RMSNorm", "SiLU", "rotary_pos_emb"}  # both doors
        assert view == explorer_view(explorer)
        explorer.off("RMSNorm", "model.norm")
        assert ("RMSNorm", "model.norm") not in kernels_view(explorer)
        assert kernels_view(explorer) == explorer_view(explorer)
    finally:
        explorer.reset()
    assert kernels_view(explorer) == {}


_steps = st.lists(
    st.tuples(
        st.booleans(),
        st.sampled_from(["RMSNorm", "SiLU", "rotary_pos_emb"]),
        st.one_of(st.none(), st.lists(st.integers(0, 4), min_size=1, max_size=3)),
        st.sampled_from([None, "bundled", "peer"]),
        st.sampled_from(["inference", "training"]),  # a kernel without backward: kernelize keeps PyTorch
    ),
    min_size=1,
    max_size=8,
)


@needs_view
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=_steps)
def test_after_every_switch_the_explorer_agrees_with_kernels(peer_explorer: Explorer, steps: list) -> None:
    explorer = peer_explorer
    try:
        for switch_on, name, picks, source, mode in steps:
            group = explorer.group(name)
            instances = None if picks is None else [group.instances[i % len(group)] for i in picks]
            if not switch_on:
                explorer.off(name, instances)
            else:
                candidate = None if source == "peer" and name != "RMSNorm" else source  # peer: RMSNorm
                if candidate == "peer":
                    candidate = explorer._peer_label  # type: ignore[attr-defined]
                explorer.on(name, instances, candidate=candidate, mode=mode)
            assert kernels_view(explorer) == explorer_view(explorer), (switch_on, name, picks, source, mode)
    finally:
        explorer.reset()
    assert kernels_view(explorer) == {}


# -- a layer kernelize left on PyTorch says which KernelizeFallback flag, and why -------------------


def _rmsnorm_modules() -> list:
    model = tiny_llama()
    return [model.model.norm]


def _entry(repo: Path, *, layer: str = "RMSNorm", device: str = "cpu", mode=None, key=None):  # type: ignore[no-untyped-def]
    from kernels import LocalLayerRepository, Mode

    from kernel_explorer._backend.mappings import MappingEntry

    repository = LocalLayerRepository(repo_path=repo, layer_name="RMSNorm")
    return MappingEntry(layer, device, None, mode or Mode.FALLBACK, repository, key)


def _kept(modules: list, entry, mode, **kwargs) -> str:  # type: ignore[no-untyped-def]
    from kernel_explorer._backend.layer_forwards import kernelize_each, runs_class_forward

    [(module, error, fallback)] = list(kernelize_each(modules, entry, mode, **kwargs))
    assert error is None and runs_class_forward(module)
    return fallback


def test_no_compatible_mode_says_the_layer_has_no_torch_compile_support(tmp_path: Path, hub: dict) -> None:
    from kernel_repos import SCALED_RMSNORM, write_repo
    from kernels import LocalLayerRepository

    repo = write_repo(tmp_path, "kx-no-compile", layers=SCALED_RMSNORM)  # no can_torch_compile
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=repo, layer_name="RMSNorm")}}
    explorer = Explorer(tiny_llama(), mapping, include_bundled=False, include_transformers=False)
    running = explorer.on("RMSNorm", mode="torch.compile")
    said = (
        "kernels fell back (NO_COMPATIBLE_MODE): the layer has no torch.compile support, "
        "mode inference+torch.compile"
    )
    assert running and all(not now.is_kernel and said in now.reason for now in running)
    assert all(now.reason == running[0].reason for now in explorer.running("RMSNorm"))
    explorer.on("RMSNorm")  # inference: the same kernel runs
    assert all(now.is_kernel for now in explorer.running("RMSNorm"))
    explorer.reset()


def test_no_compatible_mode_says_the_layer_has_no_backward(tmp_path: Path, hub: dict) -> None:
    from kernel_repos import NO_BACKWARD_RMSNORM, write_repo
    from kernels import Mode

    repo = write_repo(tmp_path, "kx-no-backward", layers=NO_BACKWARD_RMSNORM)
    said = _kept(_rmsnorm_modules(), _entry(repo), Mode.TRAINING)
    assert said == "kernels fell back (NO_COMPATIBLE_MODE): the layer has no backward, mode training"


def test_no_compatible_mode_says_no_repository_is_mapped_for_the_mode(tmp_path: Path, hub: dict) -> None:
    from kernel_repos import write_repo
    from kernels import Mode

    repo = write_repo(tmp_path, "kx-inference-only")
    said = _kept(_rmsnorm_modules(), _entry(repo, mode=Mode.INFERENCE), Mode.TRAINING)
    assert said == "kernels fell back (NO_COMPATIBLE_MODE): no repository is mapped for mode training"


def test_no_device_and_no_layer_are_named(tmp_path: Path, hub: dict) -> None:
    from kernel_repos import write_repo
    from kernels import Device, Mode

    repo = write_repo(tmp_path, "kx-cuda-only")
    said = _kept(_rmsnorm_modules(), _entry(repo, device="cuda"), Mode.INFERENCE, device=Device(type="cpu"))
    assert said == "kernels fell back (NO_DEVICE): no kernel is mapped for device cpu"
    said = _kept(_rmsnorm_modules(), _entry(repo, layer="LayerNorm"), Mode.INFERENCE)
    assert said == "kernels fell back (NO_LAYER): no kernel is mapped for the layer name 'RMSNorm'"


def test_no_compatible_properties_is_named(
    tmp_path: Path, hub: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one stand-in: a CUDA device of capability 9.0 (kernels asks the GPU; there is none here)."""
    import importlib

    from kernel_repos import write_repo
    from kernels import CUDAProperties, Device, Mode

    from kernel_explorer._backend.internals import module_for

    repos = importlib.import_module(module_for("kernels.layer.repos"))
    monkeypatch.setattr(repos, "_find_capability", lambda device_index=None: 90)  # the mocked CUDA device
    repo = write_repo(tmp_path, "kx-blackwell-only")
    key = Device(type="cuda", properties=CUDAProperties(min_capability=100, max_capability=120))
    said = _kept(_rmsnorm_modules(), _entry(repo, device="cuda", key=key), Mode.INFERENCE)
    assert said.startswith("kernels fell back (NO_COMPATIBLE_PROPERTIES): no kernel is mapped for this cuda")
