"""Trust at a glance: each candidate's publisher, signature, digest and lock, and the digest refusal.

Local repositories are written by the tests (tests/kernel_repos.py) with the digest the project's
builder writes (`variant_digest`); Hub repositories are published on the Hub-compatible server of
tests/hub_standin.py and read in fresh processes (tests/catalog/test_hub_access.py explains why). Nothing
is mocked: a real keyless signature cannot be made offline, so the signature paths tested are the
ones that can happen here for real: an unsigned build, a bundle that is not a valid sigstore bundle
(where `sigstore` is installed: the oldest pair), `sigstore` missing (the newest pair) and a local
build.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import kernels
import pytest
import torch
from hub_standin import HubStandIn
from kernel_repos import SCALED_RMSNORM, write_repo
from kernels import LocalLayerRepository
from packaging.version import Version
from test_hub_access import run_child

from kernel_explorer.build.builder import variant_digest
from kernel_explorer.errors import NoUsableKernelError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama

CHECKS_ON_LOAD = Version(kernels.__version__) >= Version("0.18")
NOT_ON_LOAD = "" if CHECKS_ON_LOAD else f"; not checked by kernels {kernels.__version__} on load"
HAS_SIGSTORE = importlib.util.find_spec("sigstore") is not None
NOT_A_BUNDLE = '{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json"}'  # no material, no signature


def digested_repo(
    root: Path, name: str, *, signed_looking: bool = False, layers: str = SCALED_RMSNORM
) -> Path:
    """A pure-Python repository whose metadata.json records each file's digest, as the builder's do."""
    repo = write_repo(root, name, layers=layers)
    variant = repo / "build" / "torch-cpu"
    metadata = json.loads((variant / "metadata.json").read_text())
    metadata["digest"] = variant_digest(variant)
    (variant / "metadata.json").write_text(json.dumps(metadata))
    if signed_looking:  # left out of the digest, as kernels leaves it out
        (variant / "metadata.json.sigstore").write_text(NOT_A_BUNDLE)
    return repo


def local_explorer(repo: Path, **kwargs: object) -> Explorer:
    mapping = {"RMSNorm": {"cpu": LocalLayerRepository(repo_path=repo, layer_name="RMSNorm")}}
    return Explorer(tiny_llama(), mapping, include_bundled=False, include_transformers=False, **kwargs)


def candidate_row(explorer: Explorer, query_hub: bool = False) -> dict:
    frame = explorer.inventory(query_hub=query_hub).to_pandas("candidates")
    rows = frame[frame.layer == "RMSNorm"].to_dict("records")
    assert len(rows) == 1
    return rows[0]


# -- local builds ------------------------------------------------------------------------------


def test_a_local_build_whose_digest_matches(tmp_path: Path) -> None:
    repo = digested_repo(tmp_path, "kx-digested", signed_looking=True)
    explorer = local_explorer(repo)
    row = candidate_row(explorer)
    assert row["state"] == "ready"
    assert row["publisher"] == "local, not checked"
    # kernels verifies signatures of Hub builds only: a bundle beside a local build is not read
    assert row["signature"] == "not checked: local build (kernels checks Hub builds only)"
    assert row["digest"] == f"matches: all 2 files match its digest{NOT_ON_LOAD}"
    assert row["lock"] == "not locked: local build"
    inventory = explorer.inventory()
    text, page = str(inventory), inventory._repr_html_()
    assert "RMSNorm trust of user/kx-digested: publisher local, not checked · signature not checked" in text
    assert "digest matches · lock not locked" in page and "digest: matches: all 2 files" in page
    assert explorer.on("RMSNorm")[0].is_kernel  # a build that matches loads


def test_a_changed_file_is_refused_and_never_loaded(tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    repo = digested_repo(tmp_path, "kx-changed")
    layers = repo / "build" / "torch-cpu" / "layers.py"
    # the change would say so if kernels ever imported the module
    layers.write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('loaded')\n" + layers.read_text()
    )
    explorer = local_explorer(repo)
    row = candidate_row(explorer)
    assert row["state"] == "refused" and row["reason"] == "layers.py changed since it was built"
    assert row["digest"] == "refused: layers.py changed since it was built"
    assert "user/kx-changed refused: layers.py changed since it was built" in str(explorer.inventory())

    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        before = explorer.model(ids).logits
    for now in explorer.on("RMSNorm", candidate="user/kx-changed"):
        assert not now.is_kernel
        assert "refused: layers.py changed since it was built" in now.reason
    with torch.no_grad():
        assert torch.equal(explorer.model(ids).logits, before)  # the model is untouched
    assert not marker.exists()  # never imported: not by the trial, the switch or the inventory

    strict = local_explorer(repo, strict=True)
    with pytest.raises(NoUsableKernelError, match=r"refused: layers\.py changed since it was built") as info:
        strict.on("RMSNorm", candidate="user/kx-changed")
    assert "\n" not in str(info.value) and not marker.exists()


def test_a_file_added_or_removed_is_refused_too(tmp_path: Path) -> None:
    added = digested_repo(tmp_path, "kx-added")
    (added / "build" / "torch-cpu" / "extra.py").write_text("x = 1\n")
    assert candidate_row(local_explorer(added))["digest"] == "refused: extra.py was added since it was built"
    removed = digested_repo(tmp_path, "kx-removed")
    (removed / "build" / "torch-cpu" / "layers.py").unlink()
    row = candidate_row(local_explorer(removed))
    assert row["state"] == "refused" and row["digest"] == "refused: layers.py was removed since it was built"


def test_a_build_without_a_digest_says_so_and_still_loads(tmp_path: Path) -> None:
    explorer = local_explorer(write_repo(tmp_path, "kx-no-digest"))
    row = candidate_row(explorer)
    assert row["state"] == "ready"
    assert row["digest"] == f"no digest: metadata.json records none, so no file can be checked{NOT_ON_LOAD}"
    assert explorer.on("RMSNorm")[0].is_kernel  # kernels warns and loads; so does the explorer


def test_the_bundled_builds_match_their_digest(hub: dict) -> None:
    frame = Explorer(tiny_llama(), include_transformers=False).inventory().to_pandas("candidates")
    bundled = frame[frame.source == "bundled"]
    assert len(bundled) >= 4
    assert all(digest.startswith("matches: all ") for digest in bundled.digest), bundled.digest.tolist()


def test_attention_rows_say_why_they_have_no_trust_to_read(hub: dict) -> None:
    """The attention rows' trust cells read NaN: PyTorch's eager and sdpa are no repository, and the
    Hub's attention repositories lost their trust when they read "no build for this machine". Now
    PyTorch's say so in words, and a Hub attention repository reads as every Hub row does."""
    from kernel_explorer.inventory.table import PYTORCH_TRUST, TRUST_COLUMNS

    explorer = Explorer(tiny_llama())  # Transformers' mapping: the Hub's attention repositories too
    frame = explorer.inventory().to_pandas("candidates")
    trust = list(TRUST_COLUMNS)
    assert frame[trust].notna().all().all(), frame[frame[trust].isna().any(axis=1)]
    attention = frame[frame.layer == "attention"].set_index("candidate")
    for name in ("eager", "sdpa"):
        assert attention.loc[name, trust].tolist() == [PYTORCH_TRUST] * 4
    hub_attention = attention[attention.index.str.startswith("kernels-community/")]
    hub_silu = frame[(frame.layer == "SiLU") & frame.candidate.str.startswith("kernels-community/")]
    assert len(hub_attention) and len(hub_silu)
    assert set(hub_attention.publisher) == set(hub_silu.publisher)  # the Hub's answer, as for any Hub row


def test_the_dashboard_table_shows_the_picked_candidates_trust(tmp_path: Path) -> None:
    from kernel_explorer.views.layer_table import table_rows

    explorer = local_explorer(digested_repo(tmp_path, "kx-table"))
    row = next(r for r in table_rows(explorer) if r["name"] == "RMSNorm")
    assert row["trust"] == (
        "publisher local, not checked · signature not checked · digest matches · lock not locked"
    )
    assert "digest: matches: all 2 files match its digest" in row["trust_title"]


# -- the Hub -----------------------------------------------------------------------------------

TRUST = """
def trust_of(explorer):
    frame = explorer.inventory(query_hub=True).to_pandas("candidates")
    row = frame[frame.layer == "RMSNorm"].to_dict("records")[0]
    return {k: row[k] for k in ("state", "reason", "publisher", "signature", "digest", "lock")}
"""


@pytest.fixture(scope="module")
def standin(hub: dict, tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubStandIn]:
    server = HubStandIn().start()
    server.trusted_orgs.add("kx-trusted")
    repos = tmp_path_factory.mktemp("published")
    server.commits = {  # type: ignore[attr-defined]
        "signed": server.publish("kx-trusted/signed", digested_repo(repos, "kx-signed", signed_looking=True)),
        "unsigned": server.publish("kx-untrusted/digested", digested_repo(repos, "kx-digested")),
    }
    server.publish("kx-trusted/no-digest", write_repo(repos, "kx-no-digest"))
    yield server
    server.stop()


def test_a_trusted_publishers_signed_looking_build(standin: HubStandIn, tmp_path: Path) -> None:
    result, _ = run_child(
        TRUST
        + """
e = explorer_for("kx-trusted/signed", include_bundled=False)
result["before"] = trust_of(e)
result["on"] = e.on("RMSNorm")[0].is_kernel
result["after"] = trust_of(e)
""",
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
    )
    before, after = result["before"], result["after"]
    assert before["state"] == "downloadable"
    assert before["publisher"] == "trusted: the Hub flags 'kx-trusted' as a trusted kernel publisher"
    assert before["signature"] == before["digest"] == "not checked: not downloaded yet (checked on download)"
    assert result["on"] is True
    assert after["state"] == "ready" and after["publisher"] == before["publisher"]
    assert after["digest"] == f"matches: all 2 files match its digest{NOT_ON_LOAD}"
    if HAS_SIGSTORE:  # kernels' own check reads the bundle and rejects it (the oldest pair has sigstore)
        assert after["signature"] == (
            f"failed: the signature bundle is invalid, so its integrity cannot be verified{NOT_ON_LOAD}"
        )
    else:  # kernels skips the check without sigstore, and so does the explorer
        assert after["signature"] == "not checked: sigstore is not installed (pip install sigstore)"
    assert after["lock"] == "not locked"


def test_an_unsigned_build_and_one_without_digest(standin: HubStandIn, tmp_path: Path) -> None:
    result, _ = run_child(
        TRUST
        + """
e = explorer_for("kx-untrusted/digested", include_bundled=False, trust_remote_code=["kx-untrusted/digested"])
e.on("RMSNorm")
result["unsigned"] = trust_of(e)
e = explorer_for("kx-trusted/no-digest", include_bundled=False)
result["loads"] = e.on("RMSNorm")[0].is_kernel
result["no_digest"] = trust_of(e)
""",
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
    )
    unsigned = result["unsigned"]["signature"]
    if HAS_SIGSTORE:
        assert unsigned == f"unsigned: no metadata.json.sigstore{NOT_ON_LOAD}"
    else:
        assert unsigned == "not checked: sigstore is not installed (pip install sigstore)"
    assert result["loads"] is True
    assert result["no_digest"]["digest"] == (
        f"no digest: metadata.json records none, so no file can be checked{NOT_ON_LOAD}"
    )


def test_an_untrusted_publisher_and_an_allowlisted_one(standin: HubStandIn, tmp_path: Path) -> None:
    result, _ = run_child(
        TRUST
        + """
repo = "kx-untrusted/digested"
refused = explorer_for(repo, include_bundled=False)
result["untrusted"] = trust_of(refused)
result["refused_on"] = refused.on("RMSNorm")[0].is_kernel
listed = explorer_for(repo, include_bundled=False, trust_remote_code=[repo])
result["listed"] = trust_of(listed)
result["listed_on"] = listed.on("RMSNorm")[0].is_kernel
every = Explorer(tiny_llama(), {"RMSNorm": {"cpu": LayerRepository(repo, layer_name="RMSNorm", version=1,
    trust_remote_code=True)}}, include_bundled=False, include_transformers=False)
result["every"] = trust_of(every)
""",
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
    )
    assert result["untrusted"]["state"] == "publisher not trusted" and result["refused_on"] is False
    assert result["untrusted"]["publisher"] == (
        "not trusted: the Hub does not flag 'kx-untrusted'; "
        "opt in with trust_remote_code=['kx-untrusted/digested']"
    )
    assert (
        result["listed"]["publisher"]
        == "trusted: you opted in: trust_remote_code lists 'kx-untrusted/digested'"
    )
    assert result["listed_on"] is True
    assert result["every"]["publisher"] == "trusted: you opted in with trust_remote_code=True"


def test_a_changed_file_in_the_hub_cache_is_refused(standin: HubStandIn, tmp_path: Path) -> None:
    home = tmp_path / "hf"
    marker = tmp_path / "imported"
    first, _ = run_child(
        'result["on"] = explorer_for("kx-trusted/signed", include_bundled=False).on("RMSNorm")[0].is_kernel',
        hf_home=home,
        endpoint=standin.url,
    )
    assert first["on"] is True  # downloaded, loaded (kernels 0.18+ keeps a receipt of its check)
    snapshot = home / "hub" / "kernels--kx-trusted--signed" / "snapshots" / standin.commits["signed"]  # type: ignore[attr-defined]
    layers = (snapshot / "build" / "torch-cpu" / "layers.py").resolve()  # the cache links to a blob
    layers.write_text(
        f"import pathlib\npathlib.Path({str(marker)!r}).write_text('loaded')\n" + layers.read_text()
    )
    for offline in ("0", "1"):
        result, _ = run_child(
            TRUST
            + """
e = explorer_for("kx-trusted/signed", include_bundled=False)
result["trust"] = trust_of(e)
now = e.on("RMSNorm")[0]
result["now"] = [now.is_kernel, now.reason]
now = e.on("RMSNorm", candidate="kx-trusted/signed@v1")[0]  # named: the load decision itself refuses
result["named"] = [now.is_kernel, now.reason]
""",
            hf_home=home,
            endpoint=standin.url,
            HF_HUB_OFFLINE=offline,
        )
        assert result["trust"]["state"] == "refused"
        assert result["trust"]["digest"] == "refused: layers.py changed since it was built"
        assert (
            result["now"][0] is False and "refused (torch-cpu): layers.py changed since" in result["now"][1]
        )
        assert result["named"] == [
            False,
            "kx-trusted/signed@v1 refused: layers.py changed since it was built",
        ]
        assert not marker.exists()


def test_the_lock_column(standin: HubStandIn, tmp_path: Path) -> None:
    commit = standin.commits["signed"]  # type: ignore[attr-defined]
    projects = {}
    for name, pinned in (("same", commit), ("other", "0123456789abcdef0123456789abcdef01234567")):
        project = projects[name] = tmp_path / name
        project.mkdir()
        lock = {"dependency": {"repo-id": "kx-trusted/signed", "version": 1}, "lock": {"commit": pinned}}
        (project / "kernels.lock").write_text(json.dumps([lock]))
    asked = tmp_path / "asked"
    asked.mkdir()
    (asked / "pyproject.toml").write_text('[tool.kernels.dependencies]\n"kx-trusted/signed" = 1\n')
    result, _ = run_child(
        TRUST
        + f"""
e = explorer_for("kx-trusted/signed", include_bundled=False, project={str(projects["same"])!r})
result["before"] = trust_of(e)["lock"]
e.on("RMSNorm")
result["same"] = trust_of(e)["lock"]
def lock_of(project=None):
    return trust_of(explorer_for("kx-trusted/signed", include_bundled=False, project=project))["lock"]
result["other"] = lock_of({str(projects["other"])!r})
result["asked"] = lock_of({str(asked)!r})
result["none"] = lock_of()
""",
        hf_home=tmp_path / "hf",
        endpoint=standin.url,
    )
    assert result["before"] == f"locked: at {commit[:7]}; not downloaded yet"
    assert result["same"] == f"matches: pinned commit {commit[:7]}"
    assert result["other"] == f"differs: the lock pins 0123456, v1 is {commit[:7]} here"
    assert result["asked"] == "not locked: the project asks v1; run `kernels lock <project>`"
    assert result["none"] == "not locked"
