"""Every text architecture of the installed Transformers whose modeling code has a kernel hook, as a
tiny random model through the Explorer: one line each (rows and what `on` left running, the best
candidate's state, the largest logits error of each row alone relative to the logits' largest
value, whether everything off restored the logits bitwise), then the count built and run.

The sweep itself is `tests/architectures.py` (the slow test `tests/inspect/test_architectures.py` asserts
it): nothing here is per architecture, so a Transformers upgrade's new ones are swept as they come.

    python bench/architectures.py [model_type ...]
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # Hub candidates read "offline and not cached", at once

from architectures import hooked_architectures, sweep_one, table


def main(argv: list[str]) -> None:
    results = []
    for model_type in argv or hooked_architectures():
        found = sweep_one(model_type)
        results.append(found)
        print(table([found]).splitlines()[0], flush=True)
    print(table(results).splitlines()[-1])
    left_out = [r for r in results if not r.ran]
    if left_out:
        print("Left out:")
        for r in left_out:
            print(f"  {r.model_type}: {r.why_not}")


if __name__ == "__main__":
    main(sys.argv[1:])
