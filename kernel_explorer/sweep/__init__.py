"""The headless compare of each model on every node of a Ray cluster, merged into one log.

- `task.py`: what one task runs on its node (`kernel-explorer compare` in a process of its own),
  without Ray: the node's log comes back as text;
- `nodes.py`: which nodes take part (all, or those carrying a resource label) and their stable names;
- `ray_sweep.py`: the driver: one task per node and model pinned to its node, each finished log
  written to the output folder and merged as it arrives, a failing node losing only its own task,
  a rerun skipping what is done. The only module that imports Ray (an optional extra:
  `pip install kernel-explorer[ray]`).

`sweep()` is the Python door (`kernel_explorer.machine.sweep`), `kernel-explorer sweep` the
command line's.

May import: errors, measure
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernel_explorer.sweep.ray_sweep import SweepResult


def sweep(address: str, models: list[str], **kwargs: Any) -> SweepResult:
    """Run the compare of each model on every node (see `ray_sweep.run_sweep` for the options)."""
    from kernel_explorer.sweep.ray_sweep import run_sweep

    return run_sweep(address, models, **kwargs)
