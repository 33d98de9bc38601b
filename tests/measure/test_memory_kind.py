"""The memory kind (`measure/kinds/memory.py`): bytes read through torch's own profiler on real ops,
real bundled kernels and real tiny Llamas, summarized as bytes with intervals and a verdict.

Sizes are asserted from the tensors' shapes and dtypes: c10's CPU allocator reports the bytes each
allocation asked for (not a rounded block), so an op that allocates only its output reads exactly
the output's bytes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from dataclasses import asdict

import pytest
import torch
from torch import nn

from kernel_explorer.errors import KernelExplorerError
from kernel_explorer.explorer import Explorer
from kernel_explorer.loading import tiny_llama
from kernel_explorer.measure.kinds import LayerRequest, kind, kinds, value_types
from kernel_explorer.measure.kinds.memory import (
    KIND,
    PAGE,
    RECORDS,
    AttentionMemory,
    LayerMemory,
    ModelPrefillMemory,
    ModelWeights,
    allocated_during,
    curve_lengths,
    memory_figure,
    memory_verdict,
)
from kernel_explorer.measure.log import ResultLog
from kernel_explorer.measure.records import Record
from kernel_explorer.measure.stats import Interval
from kernel_explorer.measure.summary import IntervalCell, Summary
from kernel_explorer.measure.verdict import Verdict

F32 = 4  # bytes of a float32


def _run(explorer: Explorer, names: list[str], **options: object) -> str:
    """Run the kind's plan for `names` in the foreground; the run's id."""
    request = LayerRequest(
        explorer._switchboard, lambda grad: explorer.captured_inputs(grad=grad), names, options=dict(options)
    )
    handle = explorer.run(KIND.plan(request), background=False)
    assert handle.outcome == "finished", handle.error
    return handle.run_id


def _values(log: ResultLog, kind_name: str, run_id: str) -> list:
    return [r.values for r in log.records(kind_name, run_id)]


# -- the meter ----------------------------------------------------------------------------------


def test_a_linear_allocates_its_output_and_keeps_nothing() -> None:
    """ATen's addmm writes the product into the one tensor it allocates: the peak is the output's
    bytes (a 1% margin for an allocation a future ATen might add, such as a packed bias), and
    nothing is left once the output is dropped."""
    linear = nn.Linear(576, 1536)
    x = torch.randn(24, 576)
    with torch.no_grad():
        used = allocated_during(lambda: linear(x))
    output = 24 * 1536 * F32
    assert output <= used.peak_bytes <= output * 1.01
    assert used.retained_bytes == 0


def test_the_peak_is_the_running_high_water_mark_not_the_sum() -> None:
    """Three allocations of n floats, each freed when the next one is made: at most two are alive
    at once, so the peak is 2n (the sum of allocations would be 3n); a tensor kept outside is
    retained. (Tensor operands only: a Python scalar operand is wrapped in a tensor of its own.)"""
    x = torch.randn(1000)
    kept: list[torch.Tensor] = []

    def chain() -> torch.Tensor:
        y = x + x
        y = y + x
        y = y + x
        kept.append(torch.empty(500))
        return y

    used = allocated_during(chain)
    assert used.peak_bytes == 2 * 1000 * F32
    assert used.retained_bytes == 500 * F32


def test_what_the_meter_cannot_see_another_threads_allocation() -> None:
    """The profiler's state is per thread: a tensor another thread allocates is not seen (what the
    module says of OpenMP workers), the calling thread's own allocation is."""
    kept: list[torch.Tensor] = []

    def elsewhere() -> None:
        worker = threading.Thread(target=lambda: kept.append(torch.empty(4096)))
        worker.start()
        worker.join()

    assert allocated_during(elsewhere).peak_bytes == 0
    assert allocated_during(lambda: torch.empty(4096)).peak_bytes == 4096 * F32


def test_a_device_it_cannot_read_is_one_line() -> None:
    with pytest.raises(KernelExplorerError, match=r"measured on cpu and cuda.*'mps'"):
        allocated_during(lambda: None, "mps")


# -- layers --------------------------------------------------------------------------------------


def test_a_layer_kernel_and_pytorch_on_the_same_inputs(hub: dict) -> None:
    """RMSNorm: the bundled kernel allocates its output through ATen inside its C++ op, and nothing
    else (seen: the peak is exactly the output's bytes); PyTorch's RMSNorm keeps float32
    intermediates beside it. Every instance, every repeat; the switches come back as they were."""
    explorer = Explorer(tiny_llama())
    before = explorer.running()
    run_id = _run(explorer, ["RMSNorm"], repeats=3, model=False, lengths=[])
    assert explorer.running() == before
    found: list[LayerMemory] = _values(explorer.results, "layer_memory", run_id)
    instances = explorer._switchboard.select("RMSNorm")
    assert len(found) == 3 * len(instances)
    tokens = explorer.captured_inputs().for_layer("RMSNorm")[instances[0]][0][0][0].shape[-2]
    output = tokens * 64 * F32  # (1, tokens, hidden 64), float32
    for values in found:
        assert values.kernel_on and values.implementation.startswith("bundled/rmsnorm")
        assert values.tokens == tokens
        assert values.kernel_peak_bytes == output
        assert values.pytorch_peak_bytes > output
        assert values.kernel_retained_bytes == values.pytorch_retained_bytes == 0
    (row,) = KIND.summarize(explorer.results).rows
    assert row["verdict"] is Verdict.SMALLER
    assert isinstance(row["kernel_bytes"], IntervalCell) and row["kernel_bytes"].median == output


def test_the_quantized_linear_reads_fewer_weight_bytes_and_keeps_its_packed_copy(hub: dict) -> None:
    """Q8_0 keeps 34 bytes per 32 weights (an fp16 scale and 32 int8 values) beside the float32 weight
    it no longer reads, twice (GGML's blocks for prefill, the GEMV layout for decode: every tiny
    Llama Linear has out_features a multiple of 16): held grows by both copies, which a forward
    passes to the op instead of the float weight."""
    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.extend("Linear", nn.Linear, "model.layers.*")
    explorer.on("Linear", candidate="bundled/quantized_linear:Q8_0Linear")
    run_id = _run(explorer, ["Linear"], repeats=2, lengths=[])
    weights = {w.side: w for w in _values(explorer.results, "model_weights", run_id)}
    linears = [
        m
        for n, m in explorer.model.named_modules()
        if n.startswith("model.layers") and isinstance(m, nn.Linear)
    ]
    numel = sum(m.weight.numel() for m in linears)
    packed = numel * 34 // 32
    kernel, pytorch = weights["kernel"], weights["pytorch"]
    assert kernel.kernels == "Linear" and pytorch.kernels == ""
    assert kernel.kept_bytes == 2 * packed and pytorch.kept_bytes == 0
    assert kernel.held_bytes == pytorch.held_bytes + 2 * packed
    # what a forward passes to an op: the op is given both copies (a prompt's rows read the blocks)
    assert pytorch.read_bytes - kernel.read_bytes == numel * F32 - 2 * packed
    assert packed / (numel * F32) == pytest.approx(34 / 32 / 4)
    rows = {row["measure"]: row for row in KIND.summarize(explorer.results).rows if row["layer"] == "model"}
    assert rows["weights read by a forward"]["verdict"] is Verdict.SMALLER
    assert rows["weights held"]["verdict"] is Verdict.LARGER
    prefill: list[ModelPrefillMemory] = _values(explorer.results, "model_prefill_memory", run_id)
    assert {p.side for p in prefill} == {"kernel", "pytorch"} and all(p.peak_bytes > 0 for p in prefill)
    assert all(now.is_kernel for now in explorer.running("Linear"))  # still on, as it was


# -- attention's curve -----------------------------------------------------------------------------


def test_attention_memory_over_the_sequence(hub: dict) -> None:
    """At 32 and 128 tokens (4x): the bundled flash kernel's peak grows with the length (its output
    and log-sum-exp), eager's faster (its scores grow with the square); sdpa is the baseline. Each
    implementation is measured at each length, and the row is back on PyTorch after."""
    explorer = Explorer(tiny_llama())
    run_id = _run(explorer, ["attention"], repeats=2, model=False, lengths=[32, 128])
    found: list[AttentionMemory] = _values(explorer.results, "attention_memory", run_id)
    peaks: dict[tuple[str, int], int] = {}
    for values in found:
        peaks[(values.role, values.tokens)] = values.peak_bytes
    assert {(v.role, v.implementation) for v in found} == {
        ("kernel", "bundled/flash_attn"),
        ("baseline", "sdpa"),
        ("pytorch", "eager"),
    }
    assert len(found) == 3 * 2 * 2
    flash = peaks[("kernel", 128)] / peaks[("kernel", 32)]
    eager = peaks[("pytorch", 128)] / peaks[("pytorch", 32)]
    assert flash == pytest.approx(4.0, rel=0.05)  # linear: the length grew 4x
    assert eager > 1.5 * flash
    assert not any(now.is_kernel for now in explorer.running("attention"))
    rows = [r for r in KIND.summarize(explorer.results).rows if r["measure"] == "peak per call, by length"]
    assert {(r["kernel"], r["tokens"]) for r in rows} == {
        (k, n) for k in ("bundled/flash_attn", "eager") for n in (32, 128)
    }
    assert all(r["verdict"] is Verdict.LARGER for r in rows if r["kernel"] == "eager")


def test_curve_lengths_are_multiples_of_the_capture_capped() -> None:
    model = tiny_llama()  # max_position_embeddings 256
    assert curve_lengths(24, model) == [24, 96, 256]
    assert curve_lengths(16, None) == [16, 64, 256, 1024]


# -- the plan's inputs -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "mode", "match"),
    [
        ({"repeats": 0}, "inference", "repeats must be a positive whole number"),
        ({"lengths": 64}, "inference", "lengths must be a list of token counts"),
        ({"tokens": 5}, "inference", r"takes repeats=, lengths= and model=, not tokens"),
        ({}, "training", "Memory is measured in inference mode"),
    ],
)
def test_bad_options_are_one_line_before_anything_runs(options: dict, mode: str, match: str) -> None:
    explorer = Explorer(tiny_llama(), include_transformers=False)
    request = LayerRequest(
        explorer._switchboard, lambda grad: explorer.captured_inputs(), ["RMSNorm"], mode, options=options
    )
    with pytest.raises(KernelExplorerError, match=match):
        KIND.plan(request)
    with pytest.raises(KernelExplorerError, match="no kernel layer 'Conv'"):
        KIND.plan(LayerRequest(explorer._switchboard, lambda grad: explorer.captured_inputs(), ["Conv"]))
    assert not explorer.results.records()


# -- verdict, summary, records ---------------------------------------------------------------------


def test_the_verdict_needs_a_ratio_clear_of_one_and_more_than_a_page() -> None:
    sure = Interval(0.5, 0.49, 0.51, 6, 0.97)
    assert memory_verdict(sure, 10 * PAGE, 20 * PAGE) is Verdict.SMALLER
    assert memory_verdict(Interval(2.0, 1.9, 2.1, 6, 0.97), 20 * PAGE, 10 * PAGE) is Verdict.LARGER
    assert memory_verdict(sure, 1000, 2000) is Verdict.NO_DIFFERENCE  # under a page apart
    assert memory_verdict(Interval(0.995, 0.99, 1.0, 6, 0.97), 99 * PAGE, 100 * PAGE) is Verdict.NO_DIFFERENCE
    assert memory_verdict(sure, 10 * PAGE, 20 * PAGE, kernel_on=False) is Verdict.KERNEL_OFF


def _records() -> ResultLog:
    """A run's worth of records as a measurement yields them (values are made up; the arithmetic is not)."""
    log = ResultLog()
    for call in range(7):
        for path in ("model.norm", "model.layers.0.input_layernorm"):
            log.append(
                Record(
                    "r",
                    LayerMemory(6144, 12288 + call % 2, 0, 0, 24, call, "bundled/rmsnorm"),
                    "RMSNorm",
                    path,
                )
            )
        for role, name, peak in (
            ("kernel", "bundled/flash_attn", 6528),
            ("baseline", "sdpa", 14592),
            ("pytorch", "eager", 33792),
        ):
            log.append(
                Record(
                    "r", AttentionMemory(name, role, 24, peak, 0, call, role == "kernel"), "attention", "a"
                )
            )
        for side, peak in (("kernel", 70000), ("pytorch", 77000)):
            log.append(Record("r", ModelPrefillMemory(side, 24, peak, 0, call)))
    log.append(Record("r", ModelWeights("kernel", 505664, 78336, 210720, "Linear")))
    log.append(Record("r", ModelWeights("pytorch", 427328, 0, 427296)))
    return log


def test_the_summary_reads_bytes_with_intervals_and_verdicts() -> None:
    summary = KIND.summarize(_records())
    assert (
        isinstance(summary, Summary)
        and summary.kind == "memory"
        and summary.title == "Memory against PyTorch"
    )
    text = summary.text()
    assert "6.1 KB [6.1, 6.1]" in text and "12.3 KB [12.3, 12.3]" in text  # bytes, with their interval
    assert "0.50x [0.50, 0.50]" in text and "smaller" in text and "larger" in text
    layer, flash, eager, held, read, prefill = summary.rows
    assert layer["verdict"] is Verdict.SMALLER and flash["verdict"] is Verdict.SMALLER
    assert eager["verdict"] is Verdict.LARGER and held["verdict"] is Verdict.LARGER
    assert read["verdict"] is Verdict.SMALLER and prefill["verdict"] is Verdict.SMALLER
    assert layer["kernel_bytes"].confidence >= 0.95  # 6 calls after the first: a 95% interval
    frame = summary.to_pandas()
    assert {"kernel_bytes", "kernel_bytes_low", "kernel_bytes_high", "ratio", "section"} <= set(frame.columns)
    assert list(frame.section) == ["layer", "attention", "attention", "model", "model", "model"]
    assert KIND.summarize(ResultLog()).text() == "Memory against PyTorch: nothing measured yet"


def test_records_round_trip_through_json() -> None:
    """Through `Record.to_dict` and JSON, and back through the registry's record classes. (On this
    branch `Record.from_dict` reads `records.VALUE_TYPES`, which does not derive from the registry
    yet: the values are rebuilt from `value_types()`, what it will read.)"""
    for record in _records().records():
        line = json.loads(json.dumps(record.to_dict()))
        values = value_types()[line["kind"]](**line["values"])
        assert values == record.values and asdict(values) == line["values"]


def test_the_kind_is_registered_with_its_records() -> None:
    assert kinds()["memory"] is KIND and kind("memory") is KIND
    assert {cls.kind for cls in RECORDS} <= set(value_types())
    assert KIND.plan is not None and KIND.title == "Memory against PyTorch"


def test_the_figure_draws_layers_and_the_curve_and_plotly_stays_lazy() -> None:
    figure = memory_figure(KIND.summarize(_records()))
    names = [trace.name for trace in figure.data]
    assert names[:2] == ["kernel", "PyTorch"]  # a bar pair per layer
    assert {"bundled/flash_attn", "eager", "sdpa (PyTorch)"} <= set(names)  # a line per implementation
    assert figure.layout.xaxis2.type == "log" and figure.layout.yaxis2.type == "log"
    imported = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, kernel_explorer.measure.kinds.memory; print('plotly' in sys.modules)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert imported.stdout.strip() == "False"


def test_the_report_has_the_memory_section_and_its_figure(tmp_path) -> None:
    """The report renders a kind it does not name: memory's table from its summary, its figure
    from `Kind.figure`."""
    from kernel_explorer.views.report import write_report

    page = write_report(_records(), tmp_path / "memory.html", title="memory").read_text()
    assert "<h2>Memory against PyTorch</h2>" in page
    assert "6.1 KB [6.1, 6.1]" in page  # the same cell text as the CLI's
    assert "Attention: peak per call by length" in page  # the figure's second panel
