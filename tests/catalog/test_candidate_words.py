"""A user's word with a code path ("bundled@avx2") names the candidates of the word before it,
with that path; a label that holds an `@` of its own (a Hub revision) still reads as itself."""

from __future__ import annotations

from dataclasses import dataclass

from kernel_explorer.catalog.words import with_code_path


@dataclass(frozen=True)
class Named:
    label: str
    source: str
    path: str | None = None


CANDIDATES = [
    Named("bundled/activation:Silu (cpu, any mode)", "bundled"),
    Named("kernels-community/activation@v1:Silu (cpu, any mode)", "transformers"),
]


def match(word: str) -> list[Named]:
    return [c for c in CANDIDATES if word in (c.label, c.source, c.label.split(":")[0])]


def test_a_word_without_a_path_reads_as_before() -> None:
    assert with_code_path("bundled", match) == [CANDIDATES[0]]
    assert with_code_path("kernels-community/activation@v1", match) == [CANDIDATES[1]]  # its own @
    assert with_code_path("nobody", match) == [] and with_code_path("nobody@avx2", match) == []


def test_a_path_after_a_source_a_repository_or_a_label_pins_that_path() -> None:
    assert with_code_path("bundled@avx2", match) == [Named(CANDIDATES[0].label, "bundled", "avx2")]
    assert with_code_path("bundled/activation@avx512:Silu (cpu, any mode)", match) == [
        Named(CANDIDATES[0].label, "bundled", "avx512")
    ]
    hub = with_code_path("kernels-community/activation@v1@avx2", match)  # the last @ is the path's
    assert hub == [Named(CANDIDATES[1].label, "transformers", "avx2")]
    assert with_code_path("bundled@", match) == []  # an empty path names nothing
