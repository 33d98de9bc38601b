"""Names a user knows select a candidate: the repository's own name (a peer folder `py-rmsnorm`,
built into the cache as `py-rmsnorm-<hash>`), its source, a Hub repository id, the layer class;
a name that matches several repositories, or none, is one line listing the names that work.

Notebook 03 tried `--candidate plain-silu` (the repository's name) and failed; `peer` was found
by trying. Real parts: the tiny Llama, the bundled kernels, a Python-only peer built here.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from kernel_repos import write_noarch_repo

from kernel_explorer import Explorer
from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.loading import tiny_llama


@pytest.fixture
def explorer(tmp_path: Path, hub: dict) -> Explorer:
    source = write_noarch_repo(tmp_path / "py-rmsnorm")
    found = Explorer(tiny_llama(), peers=[source])
    yield found
    found.reset()


def _sources(found: list) -> list[str]:
    return [c.source for c in found]


def test_the_repository_name_the_source_and_the_class_each_name_a_candidate(explorer: Explorer) -> None:
    catalog = explorer._catalog
    assert _sources(catalog.matching("RMSNorm", "py-rmsnorm", "cpu")) == ["peer"]  # not its cache folder
    assert _sources(catalog.matching("RMSNorm", "rmsnorm", "cpu")) == ["bundled"]
    assert _sources(catalog.matching("RMSNorm", "peer/py-rmsnorm", "cpu")) == ["peer"]
    assert _sources(catalog.matching("SiLU", "Silu", "cpu")) == ["bundled"]  # the class; the Hub's are cuda
    hub = catalog.matching("RMSNorm", "kernels-community/liger-kernels")  # a Hub repository id
    assert hub and {c.hub.repo_id for c in hub} == {"kernels-community/liger-kernels"}
    peer = catalog.matching("RMSNorm", "py-rmsnorm", "cpu")[0]
    assert peer.repo_name == "py-rmsnorm" and peer.repo_label != "peer/py-rmsnorm"  # the label keeps the hash


def test_on_by_the_repository_name_switches_that_kernel(explorer: Explorer) -> None:
    running = explorer.on("RMSNorm", candidate="py-rmsnorm")
    assert running and all(now.kernel_id and now.kernel_id.startswith("_py_rmsnorm_") for now in running)
    running = explorer.on("RMSNorm", candidate="rmsnorm")
    assert all(now.kernel_id and now.kernel_id.startswith("_rmsnorm_") for now in running), running


def test_a_name_of_several_repositories_is_one_line_naming_each(explorer: Explorer) -> None:
    """Both repositories' class is `RMSNorm`: the class alone names neither."""
    with pytest.raises(KernelExplorerError) as info:
        explorer.on("RMSNorm", candidate="RMSNorm")
    message = str(info.value)
    assert "\n" not in message and "'RMSNorm' names 2 candidates" in message
    assert "rmsnorm" in message and "py-rmsnorm" in message
    assert not any(now.is_kernel for now in explorer.running("RMSNorm"))  # nothing half-switched


def test_an_unknown_name_is_one_line_with_the_names_that_work(explorer: Explorer) -> None:
    with pytest.raises(KernelExplorerError) as info:
        explorer.on("RMSNorm", candidate="plain-rmsnorm")
    message = str(info.value)
    assert "\n" not in message
    assert "name one of rmsnorm, py-rmsnorm (or a source: bundled, peer)" in message, message
    assert "for other devices" in message  # the Hub's CUDA kernels, counted, not listed


def test_compare_reads_the_same_names(explorer: Explorer) -> None:
    with pytest.raises(KernelExplorerError, match="No candidate 'nobody' for layer 'RMSNorm'") as info:
        explorer.compare("RMSNorm", candidates=["py-rmsnorm", "nobody"], pairs=2)  # one bad word: no run
    assert "\n" not in str(info.value)
    with pytest.raises(KernelExplorerError, match="names 2 candidates"):
        explorer.compare("RMSNorm", candidates=["RMSNorm"], pairs=2)
    assert not explorer.results.records("layer_latency")


def test_running_names_a_peer_by_the_name_a_user_types(explorer: Explorer) -> None:
    """`print(explorer.running("RMSNorm")[0])` read `peer/py-rmsnorm-6b8833cc:RMSNorm`: the build
    folder's hash, a name nobody typed and `on` did not take. It reads `peer/py-rmsnorm:RMSNorm`,
    a word `on` takes, as the bundled kernel's `bundled/rmsnorm:RMSNorm` is."""
    explorer.on("RMSNorm", candidate="py-rmsnorm")
    text = str(explorer.running("RMSNorm")[0])
    assert ": peer/py-rmsnorm:RMSNorm (kernel _py_rmsnorm_" in text, text
    # the inventory's "runs now" names it the same way (it read `peer/py-rmsnorm-6b8833cc RMSNorm`)
    summary = explorer.inventory().row("RMSNorm").running_summary
    assert summary.startswith("peer/py-rmsnorm RMSNorm x"), summary
    explorer.on("RMSNorm", candidate="rmsnorm")
    assert ": bundled/rmsnorm:RMSNorm (kernel _rmsnorm_" in str(explorer.running("RMSNorm")[0])
    running = explorer.on("RMSNorm", candidate="peer/py-rmsnorm:RMSNorm")  # the printed name switches
    assert all(now.kernel_id and now.kernel_id.startswith("_py_rmsnorm_") for now in running)


def test_only_a_repository_built_into_the_cache_reads_as_built_there(explorer: Explorer) -> None:
    """`built_into_cache` is what the inventory asks before it renames a folder: a peer's cache
    folder (`py-rmsnorm-<digest>`) is; a bundled folder (`quantized_linear`, whose metadata says
    `quantized-linear`) is not, nor is a name that merely has a dash in it."""
    peer = explorer._catalog.matching("RMSNorm", "peer", "cpu")
    bundled = explorer._catalog.matching("RMSNorm", "bundled", "cpu")
    assert peer and all(c.built_into_cache for c in peer), [c.label for c in peer]
    assert bundled and not any(c.built_into_cache for c in bundled), [c.label for c in bundled]


def test_a_dated_folder_a_person_named_is_not_a_cache_build(tmp_path: Path, hub: dict) -> None:
    """A folder named like a build (`-` and eight hex digits) that a person made and passed as a
    peer is read by its own name, not as a cache folder whose digest may be dropped."""
    from kernel_explorer.build.builder import build_path

    built = build_path(write_noarch_repo(tmp_path / "src" / "py-rmsnorm"), progress=False).repo_path
    dated = tmp_path / "mine" / "py-rmsnorm-20240601"
    shutil.copytree(built, dated)
    explorer = Explorer(tiny_llama(), peers=[dated])
    try:
        (peer,) = [c for c in explorer._catalog.matching("RMSNorm", "peer", "cpu") if c.repository]
        assert not peer.built_into_cache
    finally:
        explorer.reset()


def test_two_peers_of_one_name_keep_the_hash_that_tells_them_apart(tmp_path: Path, hub: dict) -> None:
    first = write_noarch_repo(tmp_path / "a" / "py-rmsnorm")
    second = write_noarch_repo(tmp_path / "b" / "py-rmsnorm")
    explorer = Explorer(tiny_llama(), peers=[first, second])
    try:
        labels = {c.label for c in explorer._catalog.matching("RMSNorm", "peer", "cpu")}
        assert len(labels) == 2, labels
        chosen = sorted(labels)[0]
        explorer.on("RMSNorm", candidate=chosen)
        text = str(explorer.running("RMSNorm")[0])
        assert f": {chosen.split(' (')[0]} (kernel " in text, text  # peer/py-rmsnorm-<hash>:RMSNorm
        summary = explorer.inventory().row("RMSNorm").running_summary
        # the hash kept here: the chosen folder's, or (when an earlier explorer of this process
        # loaded the same build first and the process kept its module) the folder it came from
        assert re.match(r"(peer/)?py-rmsnorm-[0-9a-f]{8} RMSNorm x", summary), summary
    finally:
        explorer.reset()
