"""`kernel-explorer compare --model FOLDER --out x.jsonl`: any saved model, headless; the log loads back
and two machines' logs merge into one table with a machine column. Bad input: one line, status 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.views.cli import main


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("saved") / "tiny-llama"
    tiny_llama().save_pretrained(path)
    return path


def compare(folder: Path, out: Path, machine: str) -> int:
    arguments = ["--model", str(folder), "--layers", "RMSNorm", "--pairs", "3", "--out", str(out)]
    return main(["compare", *arguments, "--machine", machine, "--dtype", "float32"])


def test_a_saved_model_compared_headless_and_two_logs_merged(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    assert compare(folder, tmp_path / "a.jsonl", "box-a") == 0
    assert compare(folder, tmp_path / "b.jsonl", "box-b") == 0
    out = capsys.readouterr().out
    assert f"on {folder}" in out and "Log written to" in out
    one = ResultLog.load(tmp_path / "a.jsonl")
    verdicts = one.records("layer_verdict")
    assert [r.layer for r in verdicts] == ["RMSNorm"]
    origin = verdicts[0].provenance
    assert origin is not None and origin.host == "box-a" and origin.dtype == "float32"
    assert origin.model.startswith("LlamaForCausalLM ") and "torch" in origin.hardware

    merged = ResultLog.load(tmp_path / "a.jsonl", tmp_path / "b.jsonl")
    summary = merged.layer_summary()
    assert sorted(summary["host"]) == ["box-a", "box-b"] and "machine" in summary.columns
    wide = merged.machine_table(wide=True)
    assert len(wide) == 1 and sum(str(c).startswith(("box-a:", "box-b:")) for c in wide.columns) == 2


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (["--layers", "NoSuchLayer"], "no kernel layer 'NoSuchLayer'"),
        (["--out", "/proc/no/x.jsonl"], "cannot write /proc/no/x.jsonl"),
        (["--device", "tpu"], "device 'tpu' is not available"),  # (cuda is, on a GPU box)
    ],
)
def test_bad_input_is_one_line_and_status_2(
    folder: Path, arguments: list[str], said: str, capsys: pytest.CaptureFixture, hub: dict
) -> None:
    assert main(["compare", "--model", str(folder), *arguments]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and "\n" not in err


def test_a_folder_without_a_model_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "r.html"), "--model", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot load") and "\n" not in err
