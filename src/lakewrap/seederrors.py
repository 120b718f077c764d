"""A seed's CSV that DuckDB could not read, reported at the file's line and column.

DuckDB's ``CSV Error on Line: N`` counts records, not the file's lines (a quoted value may span
lines), and names no column position. When a seed's load fails so, the file is read once more in
a private in-memory DuckDB session with the seed's own dialect and types and ``store_rejects``
(:func:`lakewrap.compilers.lake.seed_rejects`): DuckDB's ``reject_errors`` table gives each bad
value's byte position, which is the line and column reported. Nothing of the lake is opened.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

from lakewrap.errors import ExecutionError, Location
from lakewrap.execute.binding import inline
from lakewrap.seedformat import CsvFormat

_CSV_ERROR = re.compile(r"CSV Error on Line: \d+")
_CONVERT = re.compile(r"Could not convert string \"(?P<value>.*)\" to '(?P<type>[^']*)'", re.S)


class SeedValueError(ExecutionError):
    """A value of a seed's CSV that does not read as its column's type (or a malformed row)."""


def csv_error(text: str, root: Path | None, rel: str) -> SeedValueError | None:
    """The located error for DuckDB's message ``text`` about the seed ``rel``; None when ``text`` is
    not a CSV reading error or the file reads cleanly now."""
    if root is None or not _CSV_ERROR.search(text):
        return None
    from lakewrap.seedformat import read_format, sidecar_of

    path = root / rel
    try:
        fmt, _ = read_format(root, path)
        first, count = _rejects(path, fmt.read_options())
    except Exception:  # the file or its sidecar changed since the load, or cannot be read
        return None
    if first is None:
        return None
    position, column, error_type, message = first
    data = path.read_bytes()
    start = data.rfind(b"\n", 0, position) + 1
    end = data.find(b"\n", position)
    line_text = data[start:end if end >= 0 else len(data)].decode("utf-8", "replace").rstrip("\r")
    loc = Location(rel, data.count(b"\n", 0, position) + 1,
                   len(data[start:position].decode("utf-8", "replace")) + 1, line_text)
    declared = dict(fmt.columns)
    side = sidecar_of(path).relative_to(root).as_posix()
    others = f"{count - 1} more values of the file do" if count > 2 else "1 more value of the file does"
    more = f" ({others} not read either)" if count > 1 else ""
    if error_type == "CAST":
        m = _CONVERT.search(message)
        type_ = declared.get(column or "", m.group("type") if m else "its type")
        how = "declared in " + side if column in declared else "detected by DuckDB"
        value = _field(data[position:], fmt)
        return SeedValueError(f"value {value!r} of column `{column}` does not convert to {type_} ({how})",
                              location=loc,
                              hint="fix the value, declare another type for the column in " + side
                              + ", or add the string to `null` there" + more)
    first_line = message.strip().splitlines()[0] if message.strip() else error_type
    hint = ("save the file as UTF-8" if error_type == "INVALID_UNICODE" else
            "fix the row, or set the dialect (delimiter, quote, escape, header) in " + side)
    return SeedValueError(f"the CSV does not read: {first_line}", location=loc, hint=hint + more)


def _field(rest: bytes, fmt: CsvFormat) -> str:
    """The CSV field that starts ``rest`` (unquoted, as the reader sees it)."""
    try:
        return next(csv.reader(io.StringIO(rest.decode("utf-8", "replace")), **fmt.dialect()))[0]
    except (StopIteration, IndexError, csv.Error):
        return rest.split(b"\n", 1)[0].decode("utf-8", "replace")


def _rejects(path: Path, options: dict[str, object] | None) -> tuple[tuple[int, str | None, str, str] | None, int]:
    """(byte position, column, error type, message) of the file's first bad value, and how many."""
    import duckdb

    from lakewrap.compilers.lake import seed_reject_errors, seed_rejects

    con = duckdb.connect()
    try:
        con.execute(*inline(seed_rejects(options), {"path": str(path)})).fetchall()
        rows = con.execute(seed_reject_errors()).fetchall()
    finally:
        con.close()
    if not rows:
        return None, 0
    b, column, kind, message = rows[0]
    # DuckDB 1.5.5 counts byte_position from 1 (measured: LF and CRLF files, first and later
    # fields, quoted values spanning lines): the field starts at byte_position - 1
    return (max(int(b) - 1, 0), column, str(kind), str(message)), len(rows)
