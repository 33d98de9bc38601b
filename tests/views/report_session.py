"""A session as a person runs it, on the tiny Llama with the bundled kernels: a Run of three cycles
with SiLU and RMSNorm on, a Run's cycle after SiLU was switched off, a compare of RMSNorm, then
where the time goes (a breakdown).
Shared by the report's unit tests and its browser test (one measured log, reused)."""

from __future__ import annotations

from kernel_explorer.explorer import Explorer

RUN_CYCLES = 3


def measured_session() -> Explorer:
    """The explorer after that session (its `results` hold every record); put back on PyTorch by
    the caller (`explorer.reset()`)."""
    import warnings

    from kernel_explorer.loading import tiny_llama

    explorer = Explorer(tiny_llama(), include_transformers=False)
    explorer.on("RMSNorm")
    explorer.on("SiLU")
    with warnings.catch_warnings():  # a busy machine warns that it is noisy: not what is tested
        warnings.simplefilter("ignore")
        explorer.run_live(cycles=RUN_CYCLES, budget_s=0.3).wait(300)
        explorer.off("SiLU")
        explorer.run_live(cycles=1, budget_s=0.3).wait(300)
        explorer.compare("RMSNorm", pairs=20)
        explorer.breakdown(tokens=16, repeats=1)
    return explorer
