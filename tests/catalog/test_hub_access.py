"""The Hub path, against a STAND-IN for the Hugging Face Hub (tests/hub_standin.py) on 127.0.0.1.

`huggingface_hub` reads `HF_ENDPOINT` and `HF_HUB_OFFLINE` once, at import, so every scenario runs
in a fresh Python process, as a user's later session would. The bundled rmsnorm build is published
as `kx-trusted/rmsnorm` (branch v1); small pure-Python repositories stand for the other cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import kernels
import pytest
from hub_standin import HubStandIn
from kernel_repos import write_repo
from packaging.version import Version

PRELUDE = """
import json, sys, time
from kernels import LayerRepository
from kernel_explorer.explorer import Explorer
from kernel_explorer._backend.modes import parse_mode
from kernel_explorer.loading import tiny_llama

def hub_mapping(repo_id, layer="RMSNorm"):
    return {"RMSNorm": {"cpu": LayerRepository(repo_id, layer_name=layer, version=1)}}

def explorer_for(repo_id, **kw):
    return Explorer(tiny_llama(), hub_mapping(repo_id), include_transformers=False, **kw)

def state_of(explorer, query_hub=True, wait=None):
    c = explorer._catalog.candidates("RMSNorm")[0]
    mode = parse_mode("inference")
    return explorer._catalog.availability(c, device="cpu", mode=mode, query_hub=query_hub, wait=wait)

result = {}
"""


@pytest.fixture(scope="module")
def standin(hub: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubStandIn]:
    from kernel_explorer.build.builder import build_hub

    server = HubStandIn().start()
    server.trusted_orgs.add("kx-trusted")
    rmsnorm = next(b for b in build_hub(progress=False) if b.name == "rmsnorm")
    server.publish("kx-trusted/rmsnorm", rmsnorm.repo_path)
    repos = tmp_path_factory.mktemp("published")
    server.publish("kx-untrusted/rmsnorm", write_repo(repos, "kx-untrusted-rmsnorm"))
    multi = write_repo(repos, "kx-multi")
    write_repo(repos, "kx-multi", variant="torch213-cxx11-cu126-x86_64-linux")
    server.publish("kx-trusted/multi", multi)
    server.publish(
        "kx-trusted/cuda-only", write_repo(repos, "kx-cuda-only", variant="torch213-cxx11-cu126-x86_64-linux")
    )
    yield server
    server.stop()


def run_child(code: str, *, hf_home: Path, endpoint: str | None = None, **env: str) -> tuple[dict, str]:
    """Run `code` in a fresh interpreter; returns its `result` dict and its stderr."""
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    child_env.update(
        HF_HOME=str(hf_home),
        PYTHONPATH=os.pathsep.join(str(p) for p in (Path(__file__).parents[1], Path(__file__).parent)),
        **env,
    )
    if endpoint is not None:
        child_env["HF_ENDPOINT"] = endpoint
    script = PRELUDE + textwrap.dedent(code) + "\nprint('RESULT=' + json.dumps(result))\n"
    done = subprocess.run(
        [sys.executable, "-c", script], env=child_env, capture_output=True, text=True, timeout=300
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT=")]
    assert done.returncode == 0 and lines, f"child failed:\n{done.stdout}\n{done.stderr}"
    return json.loads(lines[-1][len("RESULT=") :]), done.stderr


def test_availability_download_then_ready_then_offline_load(standin: HubStandIn, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    result, stderr = run_child(
        """
        e = explorer_for("kx-trusted/rmsnorm", include_bundled=False)
        result["inventory_before"] = e.inventory().row("RMSNorm").status
        before = state_of(e)
        result["before"] = [before.state.value, before.variant, before.size_bytes]
        now = e.on("RMSNorm")[0]
        result["running"] = [now.is_kernel, now.repository, now.variant]
        after = state_of(e)
        result["after"] = after.state.value
        """,
        hf_home=home,
        endpoint=standin.url,
    )
    assert result["before"][:2] == ["downloadable", "torch213-cxx11-cpu-x86_64-linux"]
    assert result["before"][2] > 100_000  # the compiled .so is in the size
    assert result["inventory_before"].startswith("checking")  # inventory does not ask the Hub by default
    assert result["running"] == [True, "kx-trusted/rmsnorm", "torch213-cxx11-cpu-x86_64-linux"]
    assert result["after"] == "ready"
    assert "Fetching" in stderr  # the download showed a progress bar
    refs = home / "hub" / "kernels--kx-trusted--rmsnorm" / "refs" / "v1"
    assert refs.is_file()  # fault 1 worked around: the version's ref is recorded

    offline, _ = run_child(
        """
        e = explorer_for("kx-trusted/rmsnorm", include_bundled=False)
        result["state"] = state_of(e).state.value
        now = e.on("RMSNorm")[0]
        result["running"] = [now.is_kernel, now.variant]
        missing = explorer_for("kx-trusted/multi", include_bundled=False)
        result["missing"] = state_of(missing).state.value
        result["missing_running"] = str(missing.on("RMSNorm")[0])
        """,
        hf_home=home,
        HF_HUB_OFFLINE="1",
    )
    assert offline["state"] == "ready"
    assert offline["running"] == [True, "torch213-cxx11-cpu-x86_64-linux"]
    assert offline["missing"] == "offline and not cached"
    assert "offline and not cached" in offline["missing_running"]


def test_states_the_hub_reports(standin: HubStandIn, tmp_path: Path) -> None:
    result, _ = run_child(
        """
        for repo in ["kx-untrusted/rmsnorm", "kx-trusted/cuda-only", "kx-trusted/absent"]:
            found = state_of(explorer_for(repo, include_bundled=False))
            result[repo] = [found.state.value, found.reason, list(found.trace)]
        """,
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
    )
    state, reason, _ = result["kx-untrusted/rmsnorm"]
    assert state == "publisher not trusted" and "trust_remote_code=['kx-untrusted/rmsnorm']" in reason
    state, _, trace = result["kx-trusted/cuda-only"]
    assert state == "no build for this machine"
    assert any("cu126" in line and "backend" in line for line in trace)
    assert result["kx-trusted/absent"][0] == "failed to load"


def test_untrusted_publisher_stays_off_until_listed(standin: HubStandIn, tmp_path: Path) -> None:
    result, _ = run_child(
        """
        refused = explorer_for("kx-untrusted/rmsnorm").on("RMSNorm")
        result["refused"] = [any(r.is_kernel for r in refused), refused[0].reason]
        trusted = explorer_for("kx-untrusted/rmsnorm", trust_remote_code=["kx-untrusted/rmsnorm"])
        now = trusted.on("RMSNorm")
        result["listed"] = [all(r.is_kernel for r in now), now[0].repository]
        """,
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
    )
    assert result["refused"][0] is False and "not flag 'kx-untrusted'" in result["refused"][1]
    assert result["listed"] == [True, "kx-untrusted/rmsnorm"]


# The three faults hub_access.py works around are kernels 0.17's; 0.18 fixed them. The third (an
# empty user agent with telemetry off) also needs huggingface_hub before 2.5, which sends a valid
# header whatever kernels hands it: the old pair's `.ci/run` resolves 2.5 since it was released.
OLD_FAULTS = Version(kernels.__version__) < Version("0.18")
EMPTY_AGENT_FAULT = OLD_FAULTS and Version(huggingface_hub.__version__) < Version("2.5")


def test_faults_1_and_2_a_native_download_still_loads_offline(standin: HubStandIn, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    run_child(
        'LayerRepository("kx-trusted/multi", layer_name="RMSNorm", version=1).load()',
        hf_home=home,
        endpoint=standin.url,
    )
    # kernels 0.18 fixed faults 1 and 2 (it writes the ref; it loads a partial snapshot offline);
    # the explorer's way must load either way
    assert (home / "hub" / "kernels--kx-trusted--multi" / "refs" / "v1").exists() is not OLD_FAULTS
    result, _ = run_child(
        """
        from kernels import get_kernel
        try:
            LayerRepository("kx-trusted/multi", layer_name="RMSNorm", version=1).load()
            result["native_version"] = "loaded"
        except Exception as error:
            result["native_version"] = str(error)
        e = explorer_for("kx-trusted/multi", include_bundled=False)
        snapshot = __import__("kernel_explorer.catalog.hub_access", fromlist=["x"]).cached_variant_dir(
            e._catalog.candidates("RMSNorm")[0].hub).parent.parent
        try:
            get_kernel("kx-trusted/multi", revision=snapshot.name)
            result["native_commit"] = "loaded"
        except Exception as error:
            result["native_commit"] = str(error)
        now = e.on("RMSNorm")[0]
        result["explorer"] = [now.is_kernel, now.variant]
        """,
        hf_home=home,
        HF_HUB_OFFLINE="1",
    )
    if OLD_FAULTS:
        assert "not available in the local cache" in result["native_version"]  # fault 1
        assert "Cannot find a local snapshot" in result["native_commit"]  # fault 2
    else:
        assert result["native_version"] == result["native_commit"] == "loaded"
    assert result["explorer"] == [True, "torch-cpu"]


def test_fault_3_telemetry_off_still_loads(standin: HubStandIn, tmp_path: Path) -> None:
    result, _ = run_child(
        """
        try:
            LayerRepository("kx-trusted/multi", layer_name="RMSNorm", version=1).load()
            result["native"] = "loaded"
        except Exception as error:
            result["native"] = str(error)
        now = explorer_for("kx-trusted/multi", include_bundled=False).on("RMSNorm")[0]
        result["explorer"] = now.is_kernel
        """,
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    assert ("Illegal header value" in result["native"]) is EMPTY_AGENT_FAULT, result["native"]
    assert result["explorer"] is True


def test_corrupt_cache_entry_leaves_pytorch_with_the_reason(standin: HubStandIn, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    run_child(
        'explorer_for("kx-trusted/multi", include_bundled=False).on("RMSNorm")',
        hf_home=home,
        endpoint=standin.url,
    )
    snapshots = home / "hub" / "kernels--kx-trusted--multi" / "snapshots"
    layers = next(snapshots.glob("*/build/torch-cpu/layers.py"))
    layers.resolve().write_text("this is not python (\n")
    result, _ = run_child(
        """
        e = explorer_for("kx-trusted/multi")
        hub = e._catalog.candidates("RMSNorm")[0]
        result["rms"] = [str(r) for r in e.on("RMSNorm", candidate=hub)]
        result["silu"] = [r.is_kernel for r in e.on("SiLU")]
        result["state"] = state_of(e).state.value
        result["default"] = [r.repository for r in e.on("RMSNorm")]
        """,
        hf_home=home,
        HF_HUB_OFFLINE="1",
    )
    said = [text.split(": ", 1)[1] for text in result["rms"]]  # each "<instance>: PyTorch (<why>)"
    assert all(text.startswith("PyTorch") and "SyntaxError" in text for text in said)
    assert result["silu"] == [True, True]
    assert result["state"] == "cannot run here"  # loads no more: its trial on the model says so
    assert all("rmsnorm" in repository for repository in result["default"])  # passed over: bundled


def test_hub_queries_are_time_bounded_and_answered_later(standin: HubStandIn, tmp_path: Path) -> None:
    standin.delay = 0.5
    try:
        result, _ = run_child(
            """
            e = explorer_for("kx-trusted/rmsnorm", include_bundled=False)
            start = time.perf_counter()
            first = state_of(e, wait=0.1)
            result["first"] = [first.state.value, time.perf_counter() - start]
            time.sleep(4)
            result["later"] = state_of(e, query_hub=False).state.value
            """,
            hf_home=tmp_path / "hf",
            endpoint=standin.url,
        )
    finally:
        standin.delay = 0.0
    assert result["first"][0] == "checking" and result["first"][1] < 0.5
    assert result["later"] == "downloadable"
