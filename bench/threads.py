"""Threads for a bench, set the way a user's session has them.

`torch.set_num_threads(n)` changes more than the count. After it, even with `n` equal to the count
PyTorch already had, PyTorch's SDPA at short lengths runs much slower on this project's hosts:
SmolLM2's attention at 16 tokens on 2 threads took 16 us in a process that never called it and
30 us after `torch.set_num_threads(2)` (AMD EPYC Zen 4, torch 2.13 with MKL;
`bench/results/sdpa-after-set-num-threads-zen4-2026-12-06.txt`). A notebook that never calls it
gets the first, so a bench calls it only to change the count, and says which it did.
"""

from __future__ import annotations


def use_threads(n: int | None) -> str:
    """Make torch run `n` threads (None: as it is) and return a line saying how it came to."""
    import torch

    default = torch.get_num_threads()
    if n is None or n == default:
        return f"{default} threads (PyTorch's own count: torch.set_num_threads not called)"
    torch.set_num_threads(n)
    return f"{n} threads (torch.set_num_threads({n}); PyTorch's own count here is {default})"
