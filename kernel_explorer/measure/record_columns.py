"""Records of one kind as columns: what keeps an hour's Run small.

A Run appends a record per timed pair, 13,000 to 40,000 a minute on the default model. As a frozen
`Record` with its value object a latency pair took about 430 bytes of Python objects; as columns it
takes about 27: its numbers in numpy arrays that grow by chunks, its strings (run id, layer,
instance, a mode) and its provenance (one per instance and run, repeated on every pair) as integer
codes into small tables that the log shares (`Table`), full chunks packed (`_Sealed`).

A kind is kept this way when every field of its value class is a scalar (`float`, `int`, `bool`,
`str`, or one of them or None: `scalar_columns`); the verdicts (a tuple of notes, a `Verdict`) stay
objects in the log. A record whose values are not exactly of their declared types (a numpy float
where a float is declared, an int where a float is) is refused here and kept as an object too, so
a record read back is always equal to, and of the same types as, the one appended.

Chunks start small and double up to `CHUNK_ROWS` rows, then a full chunk is sealed and the next
begins (amortised: a row written is never copied more than a few times). Past `SPILL_BYTES` held in
memory, the log writes the oldest sealed chunks to files in this process's cache folder
(`spill_folder`, removed at exit) and reads them back only when asked for.
"""

from __future__ import annotations

import atexit
import dataclasses
import itertools
import os
import shutil
import socket
import threading
import types
import typing
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernel_explorer.measure.records import Provenance, Record

#: rows per sealed chunk: large enough that a chunk's arrays are one allocation each (8192 rows of
#: a latency record: about half a megabyte), small enough that spilling one is a short write
CHUNK_ROWS = 8192
#: rows a kind's first chunk holds before it doubles: most kinds have a record or two per run, and
#: 17 kinds at full chunks would hold 9 MB of empty arrays per log
FIRST_ROWS = 16
#: what a log keeps of its sealed chunks in memory before it spills the oldest to the cache folder.
#: A Run on the default model makes 14,000 to 105,000 latency pairs a minute (a busy and a quiet
#: 2-core machine, bench/run_memory.py), about 27 bytes each packed: 0.4 to 2.9 MB a minute. At
#: 32 MB a quiet machine's Run spills after about 11 minutes and stays there, so no Run adds more
#: than a third of the 100 MB an hour may add to the process (issue 47); a busy machine's hour
#: still fits in memory, where summaries read it fastest (spilled chunks come back from disk).
SPILL_BYTES = 32 * 2**20

_SCALARS: dict[type, type[np.generic]] = {
    float: np.float64,
    int: np.int64,
    bool: np.bool_,
    str: np.int32,  # a code into the log's string table
}
_INT64 = (-(2**63), 2**63 - 1)

#: the columns every record has, besides its values' (raw: strings and the provenance as codes)
BASE = ("seq", "run_id", "layer", "instance", "time", "origin")
_BASE_DTYPES = (np.int64, np.int32, np.int32, np.int32, np.float64, np.int32)


@dataclass(frozen=True)
class Column:
    """One field of a value class as a column: its name, its scalar type, whether it may be None."""

    name: str
    type: type
    optional: bool

    @property
    def present(self) -> str | None:
        """The name of the column that says which rows hold a value (None for a string: code -1)."""
        return f"{self.name}?" if self.optional and self.type is not str else None


def field_columns(values_type: type) -> list[tuple[str, Column | None]]:
    """Each field of a record's value class by name: its column where it is a scalar, else None."""
    hints = typing.get_type_hints(values_type)
    found: list[tuple[str, Column | None]] = []
    for field in dataclasses.fields(values_type):
        hint = hints.get(field.name)
        union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
        args = typing.get_args(hint) if union else (hint,)
        kept = [a for a in args if a is not type(None)]
        scalar = len(kept) == 1 and kept[0] in _SCALARS
        kind: Any = kept[0] if kept else None  # a scalar class once `scalar` holds
        found.append((field.name, Column(field.name, kind, len(kept) < len(args)) if scalar else None))
    return found


def scalar_columns(values_type: type) -> tuple[Column, ...] | None:
    """The fields of a record's value class as columns, or None when one is not a scalar."""
    if not dataclasses.is_dataclass(values_type):
        return None
    try:
        found = field_columns(values_type)
    except (NameError, TypeError):
        return None
    columns = tuple(column for _, column in found if column is not None)
    return columns if len(columns) == len(found) else None


class Table:
    """Distinct values (strings, provenances) by integer code, in the order first seen; -1 is None.

    Shared by every kind of one log: a Run's few hundred distinct strings and one provenance per
    instance and run stand for hundreds of thousands of records.
    """

    def __init__(self) -> None:
        self._codes: dict[Any, int] = {}
        self.values: list[Any] = []

    def code(self, value: Any) -> int:
        if value is None:
            return -1
        found = self._codes.get(value)
        if found is None:
            found = self._codes[value] = len(self.values)
            self.values.append(value)
        return found

    def known(self, value: Any) -> int | None:
        """The code of `value` when the table holds it (-1 for None), else None."""
        return -1 if value is None else self._codes.get(value)

    def lookup(self) -> np.ndarray:
        """An object array of the values with None last, so that `lookup[codes]` decodes (-1: None)."""
        found = np.empty(len(self.values) + 1, dtype=object)
        found[: len(self.values)] = self.values
        return found


class _Chunk:
    """Rows of one kind in growing arrays (one per column), filled from the first row on."""

    __slots__ = ("arrays", "rows")

    def __init__(self, layout: dict[str, type[np.generic]], capacity: int) -> None:
        self.arrays = {name: np.empty(capacity, dtype) for name, dtype in layout.items()}
        self.rows = 0

    @property
    def capacity(self) -> int:
        return len(self.arrays["seq"])

    def grow(self, capacity: int) -> None:
        for name, old in self.arrays.items():
            new = np.empty(capacity, old.dtype)
            new[: self.rows] = old[: self.rows]
            self.arrays[name] = new

    def filled(self) -> dict[str, np.ndarray]:
        """Views of the rows written so far: later appends write past them, or into new arrays."""
        return {name: array[: self.rows] for name, array in self.arrays.items()}

    @property
    def nbytes(self) -> int:
        return sum(array.nbytes for array in self.arrays.values())


class _Sealed:
    """A full chunk, packed, exactly (`filled` gives back every value bit for bit):

    - an integer column (string and provenance codes, `seq`, int fields) as its smallest value and
      the differences from it in the narrowest unsigned type that holds them, or nothing at all
      where every row holds the same (a run id, a mode); a float column the same way by its bits
      where they differ by less than 2**32 (a chunk's times);
    - a bool column as bits;
    - a float column that is, bit for bit in every row, the quotient of two others (a pair's
      speedup, pytorch_s / kernel_s; an A/A pair's ratio) as their names.

    A latency pair's 70 bytes become about 27: within a chunk a run id is one value, a layer or an
    instance one of a few, `seq` climbs by less than 65,536 and the times by seconds.
    """

    __slots__ = ("columns", "nbytes", "quotients", "rows")

    def __init__(self, chunk: _Chunk) -> None:
        self.rows = chunk.rows
        arrays = {name: array[: chunk.rows] for name, array in chunk.arrays.items()}
        self.quotients = _quotients(arrays)
        self.columns = {name: _pack(a) for name, a in arrays.items() if name not in self.quotients}
        self.nbytes = sum(
            c.nbytes if isinstance(c, np.ndarray) else c[1].nbytes for c in self.columns.values()
        )

    def filled(self) -> dict[str, np.ndarray]:
        found = {name: _unpack(column, self.rows) for name, column in self.columns.items()}
        with np.errstate(all="ignore"):
            for name, (top, bottom) in self.quotients.items():
                found[name] = found[top] / found[bottom]
        return found


def _quotients(arrays: dict[str, np.ndarray]) -> dict[str, tuple[str, str]]:
    """The float columns that are the quotient of two others in every row, bit for bit: name ->
    (numerator, denominator); an operand is never itself a quotient."""
    floats = [name for name, array in arrays.items() if array.dtype.kind == "f"]
    found: dict[str, tuple[str, str]] = {}
    operands: set[str] = set()
    with np.errstate(all="ignore"):
        for name in floats:
            if name in operands:
                continue
            for top in floats:
                for bottom in floats:
                    if len({name, top, bottom}) < 3 or top in found or bottom in found:
                        continue
                    if np.array_equal(
                        (arrays[top] / arrays[bottom]).view(np.int64), arrays[name].view(np.int64)
                    ):
                        found[name] = (top, bottom)
                        operands |= {top, bottom}
                        break
                if name in found:
                    break
    return found


#: a packed column: (its dtype, the packed data, the base its differences are from; None: bits)
_Packed = tuple[np.dtype, np.ndarray, "int | None"]
_UNSIGNED = (np.uint8, np.uint16, np.uint32)


def _pack(array: np.ndarray) -> np.ndarray | _Packed:
    """`array` packed (see `_Sealed`): exact, `_unpack` gives it back bit for bit."""
    if not len(array):
        return array
    if array.dtype.kind == "f":  # by its bits: a chunk's times differ in their low bits only
        packed = _pack(array.view(np.int64))
        return array if isinstance(packed, np.ndarray) else (array.dtype, packed[1], packed[2])
    if array.dtype.kind == "b":
        if (array == array[0]).all():
            return array.dtype, np.empty(0, np.uint8), int(array[0])
        return array.dtype, np.packbits(array), None
    low, high = int(array.min()), int(array.max())
    narrow = next((t for t in _UNSIGNED if high - low <= np.iinfo(t).max), None)
    if narrow is None:
        return array
    deltas = np.empty(0, np.uint8) if high == low else (array - low).astype(narrow)
    return array.dtype, deltas, low


def _unpack(column: np.ndarray | _Packed, rows: int) -> np.ndarray:
    if isinstance(column, np.ndarray):
        return column
    dtype, data, base = column
    if base is None:
        return np.unpackbits(data, count=rows).astype(dtype)
    ints = data.astype(np.int64) + base if len(data) else np.full(rows, base, np.int64)
    return ints.view(dtype) if dtype.kind == "f" else ints.astype(dtype)


@dataclass(frozen=True)
class _Spilled:
    """A sealed chunk written to a file; `runs` are the run codes it holds (a read of one run skips
    the files without it)."""

    path: Path
    rows: int
    runs: frozenset[int]


class RecordColumns:
    """Records of one kind (one value class) as columns; see the module doc.

    Not thread-safe on its own: the log appends under its lock, and reads a `parts()` snapshot
    taken under it (the rows a snapshot names are never written again).
    """

    _numbers = itertools.count()

    def __init__(self, values_type: type, strings: Table, origins: Table) -> None:
        fields = scalar_columns(values_type)
        if fields is None:
            raise TypeError(f"{values_type.__name__} has a field that is not a scalar")
        self.values_type = values_type
        self.fields = fields
        self.strings = strings
        self.origins = origins
        layout: dict[str, type[np.generic]] = dict(zip(BASE, _BASE_DTYPES, strict=True))
        for column in fields:
            layout[column.name] = _SCALARS[column.type]
            if column.present is not None:
                layout[column.present] = np.bool_
        self._layout = layout
        self._sealed: list[_Sealed | _Spilled] = []
        self.sealed_bytes = 0  # of the sealed chunks still in memory: what spilling frees
        self._current = _Chunk(layout, FIRST_ROWS)
        self._rows = 0
        self._number = next(self._numbers)
        self._files: list[Path] = []  # removed when these columns are collected (and at exit)
        weakref.finalize(self, _remove, self._files)

    def __len__(self) -> int:
        return self._rows

    @property
    def memory_bytes(self) -> int:
        """Bytes of the chunks held in memory (the current one at its capacity)."""
        return self._current.nbytes + self.sealed_bytes

    @property
    def spilled_rows(self) -> int:
        return sum(c.rows for c in self._sealed if isinstance(c, _Spilled))

    def append(self, seq: int, record: Record) -> bool:
        """Add `record` as row `seq` of the log; False (and nothing added) when it does not fit."""
        row = self._row(seq, record)
        if row is None:
            return False
        chunk = self._current
        if chunk.rows == chunk.capacity:
            if chunk.capacity < CHUNK_ROWS:
                chunk.grow(min(2 * chunk.capacity, CHUNK_ROWS))
            else:
                sealed = _Sealed(chunk)
                self._sealed.append(sealed)
                self.sealed_bytes += sealed.nbytes
                chunk = self._current = _Chunk(self._layout, CHUNK_ROWS)
        at = chunk.rows
        for array, value in zip(chunk.arrays.values(), row, strict=True):
            array[at] = value
        chunk.rows += 1
        self._rows += 1
        return True

    def _row(self, seq: int, record: Record) -> list[Any] | None:
        """The row's values in layout order, or None when a value is not exactly its declared type."""
        if type(record) is not Record or type(record.values) is not self.values_type:
            return None
        layer, instance, origin = record.layer, record.instance, record.provenance
        if type(record.run_id) is not str or type(record.time) is not float:
            return None
        if not (layer is None or type(layer) is str) or not (instance is None or type(instance) is str):
            return None
        if origin is not None and type(origin) is not Provenance:
            return None
        values = []
        for column in self.fields:
            value = getattr(record.values, column.name)
            if value is None:
                if not column.optional:
                    return None
                values.append((column, None))
                continue
            if type(value) is not column.type:
                return None
            if column.type is int and not _INT64[0] <= value <= _INT64[1]:
                return None
            values.append((column, value))
        try:
            origin_code = self.origins.code(origin)
        except TypeError:  # a provenance holding a list: not hashable, kept as an object
            return None
        row: list[Any] = [
            seq,
            self.strings.code(record.run_id),
            self.strings.code(layer),
            self.strings.code(instance),
            record.time,
            origin_code,
        ]
        for column, value in values:
            if column.type is str:
                row.append(self.strings.code(value))
            else:
                row.append(0 if value is None else value)
                if column.present is not None:
                    row.append(value is not None)
        return row

    def spill_oldest(self) -> int:
        """Write the oldest sealed chunk still in memory to a file; the bytes freed (0: none left)."""
        at = next((i for i, c in enumerate(self._sealed) if isinstance(c, _Sealed)), None)
        if at is None:
            return 0
        chunk = self._sealed[at]
        assert isinstance(chunk, _Sealed)
        path = spill_folder() / f"{self._number}-{self.values_type.kind}-{at}.npz"
        with path.open("wb") as out:
            arrays: dict[str, Any] = {_file_name(name): array for name, array in chunk.filled().items()}
            np.savez(out, *(), **arrays)
        self._files.append(path)
        runs = frozenset(np.unique(_unpack(chunk.columns["run_id"], chunk.rows)).tolist())
        self._sealed[at] = _Spilled(path, chunk.rows, runs)
        self.sealed_bytes -= chunk.nbytes
        return chunk.nbytes

    def parts(self) -> list[dict[str, np.ndarray] | _Sealed | _Spilled]:
        """What the columns hold now, oldest first: the sealed chunks (never written again), the
        spilled files and views of the current chunk's rows. Taken under the log's lock (cheap);
        read (`rows`) outside it."""
        return [*self._sealed, self._current.filled()]

    def rows(
        self, parts: Iterable[dict[str, np.ndarray] | _Sealed | _Spilled], run: int | None = None
    ) -> dict[str, np.ndarray]:
        """The raw columns (codes for strings and provenance) of `parts`, of one run code when given;
        packed chunks are unpacked and spilled ones read back from their files here."""
        pieces = []
        for part in parts:
            if isinstance(part, _Spilled):
                if run is not None and run not in part.runs:
                    continue
                part = _read(part.path, self._layout)
            elif isinstance(part, _Sealed):
                part = part.filled()
            if run is not None:
                keep = part["run_id"] == run
                part = {name: array[keep] for name, array in part.items()}
            pieces.append(part)
        if not pieces:
            return {name: np.empty(0, dtype) for name, dtype in self._layout.items()}
        return {name: np.concatenate([p[name] for p in pieces]) for name in self._layout}

    def records(self, raw: dict[str, np.ndarray], strings: np.ndarray, origins: np.ndarray) -> list[Record]:
        """`Record`s equal to those appended, from raw columns (`rows`) and the tables' lookups."""
        values = []
        for column in self.fields:
            found = raw[column.name]
            if column.type is str:
                values.append(strings[found].tolist())
                continue
            found = found.tolist()
            if column.present is not None:
                present = raw[column.present].tolist()
                found = [v if p else None for v, p in zip(found, present, strict=True)]
            values.append(found)
        made = self.values_type
        return [
            Record(run_id, made(*fields), layer, instance, time, origin)
            for run_id, layer, instance, time, origin, *fields in zip(
                strings[raw["run_id"]].tolist(),
                strings[raw["layer"]].tolist(),
                strings[raw["instance"]].tolist(),
                raw["time"].tolist(),
                origins[raw["origin"]].tolist(),
                *values,
                strict=True,
            )
        ]

    def columns(
        self, raw: dict[str, np.ndarray], strings: np.ndarray, origins: list[Any]
    ) -> dict[str, np.ndarray]:
        """Decoded columns (see `ResultLog.columns`) from raw ones."""
        found: dict[str, np.ndarray] = {}
        for column in self.fields:
            found[column.name] = decoded(column, raw, strings)
        found |= base_columns(raw, strings, origins)
        return found


def decoded(column: Column, raw: dict[str, np.ndarray], strings: np.ndarray) -> np.ndarray:
    """One value column as `ResultLog.columns` gives it: floats and ints as they are (NaN for None,
    as float64, where the field may be None), strings and optional bools as objects (None)."""
    found = raw[column.name]
    if column.type is str:
        return strings[found]
    if column.present is None:
        return found
    present = raw[column.present]
    if column.type is bool:
        out = found.astype(object)
        out[~present] = None
        return out
    out = found.astype(np.float64)
    out[~present] = np.nan
    return out


def base_columns(
    raw: dict[str, np.ndarray], strings: np.ndarray, origins: list[Any]
) -> dict[str, np.ndarray]:
    """seq, run_id, layer, instance, time and the provenance's kernel_id, isa and candidate."""
    found = {
        "seq": raw["seq"],
        "run_id": strings[raw["run_id"]],
        "layer": strings[raw["layer"]],
        "instance": strings[raw["instance"]],
        "time": raw["time"],
    }
    codes = raw["origin"]
    for name in ("kernel_id", "isa", "candidate"):
        table = np.empty(len(origins) + 1, dtype=object)
        table[: len(origins)] = [None if p is None else getattr(p, name) for p in origins]
        found[name] = table[codes]
    return found


def object_columns(values_type: type, seqs: list[int], records: list[Record]) -> dict[str, np.ndarray]:
    """The columns of records kept as objects (a verdict's kind, a record that did not fit), in the
    shapes `ResultLog.columns` gives: a scalar field as `decoded` gives it, any other field (a tuple
    of notes, a `Verdict`) or a scalar field holding another type as an object array."""
    strings = Table()
    found: dict[str, np.ndarray] = {}
    for name, column in field_columns(values_type):
        cells = [getattr(r.values, name) for r in records]
        exact = column is not None and all(
            (v is None and column.optional) or type(v) is column.type for v in cells
        )
        if column is None or not exact:
            found[name] = _objects(cells)
            continue
        raw: dict[str, np.ndarray] = {}
        if column.type is str:
            raw[name] = np.array([strings.code(v) for v in cells], dtype=np.int32)
        else:
            raw[name] = np.array([0 if v is None else v for v in cells], dtype=_SCALARS[column.type])
            if column.present is not None:
                raw[column.present] = np.array([v is not None for v in cells], dtype=np.bool_)
        found[name] = decoded(column, raw, strings.lookup())
    found |= {
        "seq": np.array(seqs, dtype=np.int64),
        "run_id": _objects([r.run_id for r in records]),
        "layer": _objects([r.layer for r in records]),
        "instance": _objects([r.instance for r in records]),
        "time": np.array([r.time for r in records], dtype=np.float64),
    }
    for name in ("kernel_id", "isa", "candidate"):
        found[name] = _objects(
            [None if r.provenance is None else getattr(r.provenance, name) for r in records]
        )
    return found


def _objects(cells: list[Any]) -> np.ndarray:
    found = np.empty(len(cells), dtype=object)
    found[:] = cells
    return found


def _file_name(column: str) -> str:
    return column.replace("?", "__present")


def _read(path: Path, layout: dict[str, type[np.generic]]) -> dict[str, np.ndarray]:
    from kernel_explorer.errors import KernelExplorerError

    try:
        with np.load(path) as stored:
            return {name: stored[_file_name(name)] for name in layout}
    except FileNotFoundError:
        raise KernelExplorerError(
            f"The log's spilled records at {path} are gone (the cache folder was removed while the log "
            "was in use): export logs before clearing the cache."
        ) from None


def _remove(paths: list[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)


_folder: tuple[int, Path] | None = None
_folder_lock = threading.Lock()


def spill_folder() -> Path:
    """This process's folder for spilled columns, `<cache root>/log-columns/<host>-<pid>`: made on
    the first spill, removed at exit (a folder left by a process that died is removed by the next
    process of the same host that spills)."""
    global _folder
    with _folder_lock:
        if _folder is None or _folder[0] != os.getpid():  # a forked child has its own
            from kernel_explorer.build.cache import writable_cache_dir

            host = socket.gethostname()
            folder = writable_cache_dir("log-columns", f"{host}-{os.getpid()}")
            _remove_dead(folder.parent, host)
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            _folder = (os.getpid(), folder)
        return _folder[1]


def _remove_dead(root: Path, host: str) -> None:
    """Remove the spill folders of this host's processes that no longer run."""
    for folder in root.glob(f"{host}-*"):
        pid = folder.name.rpartition("-")[2]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except OSError:  # alive, another user's
            continue
