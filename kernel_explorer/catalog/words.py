"""How a user's word names candidates with a code path: "bundled@avx2".

Kept apart from the catalog so every list of candidates (the catalog's layers, the attention
door's implementations) reads the word the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

C = TypeVar("C", bound="DataclassInstance")  # a candidate of any source: a dataclass with a `path`


def with_code_path(word: str, match: Callable[[str], list[C]]) -> list[C]:
    """The candidates `match` finds for `word`, or for a word with a code path ("bundled@avx2",
    "bundled/activation@avx2:SiLU (cpu, inference)"): those candidates with the path pinned while
    on (switching/code_paths.py). The last `@` is tried first: a Hub label holds one of its own."""
    found = match(word)
    ats = [i for i, ch in enumerate(word) if ch == "@"]
    for at in reversed(ats if not found else []):
        tail = word[at + 1 :]
        path = re.split(r"[:\s]", tail, maxsplit=1)[0]
        found = match(word[:at] + tail[len(path) :]) if path else []
        if found:
            return [replace(c, path=path) for c in found]
    return found
