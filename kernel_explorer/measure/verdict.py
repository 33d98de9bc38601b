"""What a comparison concluded (about speed, or memory), as a value: code compares members, people
read the text.

Every record, summary table, plot and report carries one `Verdict`. It is a `str` enum, so a
record written to JSONL stores its plain text and a table shows it as a word, while code decides
with `is`/`==` against a member and never by parsing a sentence. The reason that goes with
"not measurable" (how many pairs the machine stalled) lives in the record's own counts, and
`describe` joins them for a reader.
"""

from __future__ import annotations

from enum import Enum


class Verdict(str, Enum):
    """Faster, slower (time), smaller, larger (memory), no difference, not measurable, or the kernel
    was off (PyTorch against itself)."""

    FASTER = "faster"
    SLOWER = "slower"
    SMALLER = "smaller"  # memory: the kernel's peak is below PyTorch's (measure/kinds/memory.py)
    LARGER = "larger"
    NO_DIFFERENCE = "no difference we can detect here"
    NOT_MEASURABLE = "not measurable here"
    KERNEL_OFF = "PyTorch against PyTorch (kernel off)"

    def __str__(self) -> str:
        return self.value

    @property
    def has_speed(self) -> bool:
        """Whether a speedup goes with this verdict (no number for a stalled or kernel-off comparison)."""
        return self not in (Verdict.NOT_MEASURABLE, Verdict.KERNEL_OFF)

    @property
    def decided(self) -> bool:
        """Whether the verdict is a difference (faster, slower, smaller or larger)."""
        return self in (Verdict.FASTER, Verdict.SLOWER, Verdict.SMALLER, Verdict.LARGER)

    @classmethod
    def parse(cls, text: str | Verdict) -> Verdict:
        """A verdict from its text, older logs' sentences included.

        Logs written before verdicts were values stored "not measurable here (the machine stalled
        75 of 120 pairs)": the reason is in the record's counts, so the sentence maps to its member.
        This is the one place that reads a verdict's text.
        """
        if isinstance(text, Verdict):
            return text
        try:
            return cls(text)
        except ValueError:
            if text.startswith(cls.NOT_MEASURABLE.value):
                return cls.NOT_MEASURABLE
            raise ValueError(
                f"unknown verdict {text!r}; a verdict is one of: {', '.join(v.value for v in cls)}"
            ) from None


def describe(verdict: Verdict, *, stalled: int = 0, pairs: int = 0) -> str:
    """The verdict as a reader sees it: a stalled comparison says how many pairs the machine stalled."""
    if verdict is Verdict.NOT_MEASURABLE and pairs:
        return f"{verdict.value} (the machine stalled {stalled} of {pairs} pairs)"
    return verdict.value
