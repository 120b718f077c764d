"""A seed's sidecar, ``seeds/<schema>/<table>.toml`` beside its CSV: the CSV's dialect and the
types of the columns it names, validated with errors at the sidecar's line and column.

Keys (every one optional; without a sidecar a seed reads as before, RFC 4180 with detected types)::

    delimiter = ","           # one character
    header = true             # false: [columns] names every column, in the file's order
    quote = '"'               # one character, or "" for none
    escape = '"'              # one character, or ""; default: the quote (a doubled quote)
    null = ["", "NA"]         # the strings read as NULL (a string or a list); default ""
    date_format = "%d/%m/%Y"  # DuckDB's strptime format for DATE columns
    timestamp_format = "%d/%m/%Y %H:%M"

    [columns]                 # column = DuckDB type; a column not named keeps the detected type
    order_id = "BIGINT"
    amount = "DECIMAL(12, 2)"

Each type is checked by DuckDB's own type parser (``duckdb.sqltype``), each column against the
CSV's header line. The read options are rendered into the seed's ``read_csv`` by
``lakewrap.compilers.lake.seed_table``.
"""

from __future__ import annotations

import csv
import io
import re
import sys
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from lakewrap.errors import Location, ProjectError

KEYS = ("delimiter", "header", "quote", "escape", "null", "date_format", "timestamp_format", "columns")
_DOC = "see docs/seeds.md for the keys of a seed's .toml"


@dataclass(frozen=True)
class CsvFormat:
    """How a seed's CSV is read: its dialect and the declared column types (in declaration order)."""

    delimiter: str = ","
    header: bool = True
    quote: str = '"'
    escape: str | None = None  # None: the quote character
    null: tuple[str, ...] | None = None  # None: DuckDB's default, the empty string
    date_format: str | None = None
    timestamp_format: str | None = None
    columns: tuple[tuple[str, str], ...] = ()

    def read_options(self) -> dict[str, Any] | None:
        """The ``read_csv`` options beyond the fixed RFC 4180 dialect (None: none, the default
        dialect, whose statement is the same as before sidecars existed)."""
        out: dict[str, Any] = {}
        if self.delimiter != ",":
            out["delim"] = self.delimiter
        if self.quote != '"':
            out["quote"] = self.quote
        escape = self.quote if self.escape is None else self.escape
        if escape != '"':
            out["escape"] = escape
        if not self.header:
            out["header"] = False
        if self.null is not None:
            out["nullstr"] = list(self.null)
        if self.date_format is not None:
            out["dateformat"] = self.date_format
        if self.timestamp_format is not None:
            out["timestampformat"] = self.timestamp_format
        if self.columns:
            out["columns" if not self.header else "types"] = [list(c) for c in self.columns]
        return out or None

    def dialect(self) -> dict[str, Any]:
        """Python's ``csv`` reader arguments for the same dialect (to read the header line)."""
        escape = self.quote if self.escape is None else self.escape
        if not self.quote:
            return {"delimiter": self.delimiter, "quoting": csv.QUOTE_NONE,
                    "escapechar": escape or None}
        same = escape == self.quote
        return {"delimiter": self.delimiter, "quotechar": self.quote, "doublequote": same,
                "escapechar": None if same or not escape else escape}


def sidecar_of(csv_path: Path) -> Path:
    return csv_path.with_suffix(".toml")


def read_format(root: Path, csv_path: Path) -> tuple[CsvFormat, str | None]:
    """The format of the seed at ``csv_path`` and the sidecar's text (default, None without one).

    Raises:
        ProjectError: the sidecar is not TOML, has an unknown key or a bad value, declares a type
            DuckDB does not know or a column the CSV does not have (at the sidecar's line:column).
    """
    side = sidecar_of(csv_path)
    if not side.is_file():
        return CsvFormat(), None
    rel = side.relative_to(root).as_posix()
    try:
        text = side.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ProjectError("the seed's .toml is not UTF-8 text", location=Location(rel)) from None
    fmt = parse(text, rel)
    check_columns(fmt, text, rel, csv_path, csv_path.relative_to(root).as_posix())
    return fmt, text


def parse(text: str, rel: str) -> CsvFormat:
    """The sidecar ``text`` (the file ``rel``) validated into a :class:`CsvFormat`."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        data: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        last = len(text.splitlines())
        loc = (_loc(text, rel, int(m.group(1)), int(m.group(2))) if m else
               _loc(text, rel, last, None) if "end of document" in str(exc) and last else Location(rel))
        raise ProjectError(f"the seed's .toml is not valid TOML: {str(exc).split(' (at')[0]}", location=loc,
                           hint="write `key = value` lines and a [columns] table; " + _DOC) from None
    for key in data:
        if key not in KEYS:
            near = get_close_matches(key, KEYS, n=1, cutoff=0.6)
            raise ProjectError(f"unknown key `{key}` in a seed's .toml", location=_key(text, rel, None, key),
                               hint=(f"did you mean `{near[0]}`? " if near else "")
                               + "the keys are " + ", ".join(KEYS))

    def string(key: str, *, empty: bool) -> str | None:
        value = data.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or len(value) > 1 or (not value and not empty):
            what = "one character" + (' or ""' if empty else "")
            raise ProjectError(f"`{key}` must be {what}, not {_show(value)}", location=_value(text, rel, None, key),
                               hint=f'e.g. {key} = "{";" if key == "delimiter" else chr(34)}"')
        return value

    def text_value(key: str) -> str | None:
        value = data.get(key)
        if value is not None and (not isinstance(value, str) or not value):
            raise ProjectError(f"`{key}` must be a non-empty string, not {_show(value)}",
                               location=_value(text, rel, None, key), hint='e.g. date_format = "%d/%m/%Y"')
        return value

    header = data.get("header", True)
    if not isinstance(header, bool):
        raise ProjectError(f"`header` must be true or false, not {_show(header)}",
                           location=_value(text, rel, None, "header"),
                           hint="header = false when the CSV has no header line")
    null = data.get("null")
    if null is not None:
        if isinstance(null, str):
            null = [null]
        if not isinstance(null, list) or not all(isinstance(v, str) for v in null):
            raise ProjectError(f"`null` must be a string or a list of strings, not {_show(data['null'])}",
                               location=_value(text, rel, None, "null"), hint='e.g. null = ["", "NA"]')
    columns = data.get("columns", {})
    if not isinstance(columns, dict):
        raise ProjectError("`columns` must be a table of column = \"TYPE\"", location=_key(text, rel, None, "columns"),
                           hint='write [columns] and then lines such as amount = "DECIMAL(12, 2)"')
    declared = []
    for name, type_ in columns.items():
        if not isinstance(type_, str) or not type_.strip():
            raise ProjectError(f"the type of column `{name}` must be a string naming a DuckDB type, not {_show(type_)}",
                               location=_value(text, rel, "columns", name), hint=f'e.g. {name} = "BIGINT"')
        check_type(type_, text, rel, name)
        declared.append((name, type_.strip()))
    if not header and not declared:
        raise ProjectError("`header = false` needs a [columns] table naming every column, in the file's order",
                           location=_value(text, rel, None, "header"),
                           hint='add [columns] with one line per column, e.g. id = "BIGINT"')
    return CsvFormat(delimiter=string("delimiter", empty=False) or ",", header=header,
                     quote=q if (q := string("quote", empty=True)) is not None else '"',
                     escape=string("escape", empty=True), null=tuple(null) if null is not None else None,
                     date_format=text_value("date_format"), timestamp_format=text_value("timestamp_format"),
                     columns=tuple(declared))


def check_type(type_: str, text: str, rel: str, column: str) -> None:
    """Refuse a type DuckDB's type parser does not know (its own suggestion as the hint)."""
    import duckdb

    try:
        duckdb.sqltype(type_)
    except Exception as exc:  # CatalogException, BinderException, InvalidInputException
        said = str(exc).strip().splitlines()
        first = said[0].split(": ", 1)[-1] if said else type(exc).__name__
        near = next((line.strip().replace('"main.', '"') for line in said[1:]
                     if line.strip().startswith("Did you mean")), None)
        raise ProjectError(f"column `{column}`: DuckDB does not know the type {type_!r} ({first})",
                           location=_value(text, rel, "columns", column),
                           hint=(near + "; " if near else "")
                           + "write a DuckDB type: BIGINT, INTEGER, DECIMAL(12, 2), DOUBLE, VARCHAR, DATE, "
                           "TIMESTAMP, TIMESTAMPTZ, BOOLEAN, ...") from None


def check_columns(fmt: CsvFormat, text: str, rel: str, csv_path: Path, csv_rel: str) -> None:
    """Every declared column is one of the CSV's (header = true), or the declared columns are as
    many as the first row's fields (header = false)."""
    if not fmt.columns:
        return
    first = _first_record(csv_path, fmt)
    if fmt.header:
        for name, _ in fmt.columns:
            if name not in first:
                near = (get_close_matches(name, first, n=1, cutoff=0.6)
                        or [c for c in first if c.lower() == name.lower()])
                raise ProjectError(f"column `{name}` is not in {csv_rel} (its header line has "
                                   + ", ".join(f"`{c}`" for c in first) + ")",
                                   location=_key(text, rel, "columns", name),
                                   hint=f"did you mean `{near[0]}`?" if near else
                                   "name a column of the CSV's header line, or drop the line")
    elif len(first) != len(fmt.columns):
        raise ProjectError(f"[columns] declares {len(fmt.columns)} columns but the first row of {csv_rel} has "
                           f"{len(first)} fields", location=_key(text, rel, None, "columns"),
                           hint="with header = false, [columns] names every column, in the file's order")


def _first_record(path: Path, fmt: CsvFormat) -> list[str]:
    with path.open(encoding="utf-8", errors="replace", newline="") as fh:
        head = fh.read(1 << 20)
    for row in csv.reader(io.StringIO(head), **fmt.dialect()):
        if row:
            return row
    return []


def _show(value: Any) -> str:
    return repr(value) if not isinstance(value, bool) else str(value).lower()


# --- where a key is -------------------------------------------------------------------------------

_HEADER = re.compile(r"\s*\[\s*([^\]]*?)\s*\]\s*(#.*)?$")
_INNER = re.compile(r"""[{,]\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*=\s*""")
_KEY = re.compile(r"""\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_-]+)\s*=\s*""")


def _unquote(key: str) -> str:
    return key[1:-1] if key[:1] in "\"'" else key


def _find(text: str, table: str | None, key: str) -> tuple[int, int, int] | None:
    """(line, column of the key, column of its value), 1-based, of ``key`` in ``[table]`` (None: the
    top level); a key in an inline table ``table = { key = ... }`` is found on that line."""
    current: str | None = None
    for n, line in enumerate(text.splitlines(), 1):
        if (h := _HEADER.match(line)) is not None and not line.lstrip().startswith("[["):
            current = h.group(1).strip()
            continue
        m = _KEY.match(line)
        if m is None:
            continue
        name = _unquote(m.group(1))
        if current == table and name == key:
            return n, m.start(1) + 1, m.end() + 1
        if current is None and table is not None and name == table:  # columns = { key = "..." }
            rest = line[m.end():]
            inner = _INNER.search(rest)
            while inner is not None:
                if _unquote(inner.group(1)) == key:
                    return n, m.end() + inner.start(1) + 1, m.end() + inner.end() + 1
                inner = _INNER.search(rest, inner.end())
    if table is None:
        for n, line in enumerate(text.splitlines(), 1):  # a table header: [columns]
            if (h := _HEADER.match(line)) is not None and h.group(1).strip() == key:
                return n, line.index("[") + 1, line.index("[") + 1
    return None


def _loc(text: str, rel: str, line: int, column: int | None) -> Location:
    lines = text.splitlines()
    snippet = lines[line - 1] if 0 < line <= len(lines) else None
    return Location(rel, line, column, snippet)


def _key(text: str, rel: str, table: str | None, key: str) -> Location:
    found = _find(text, table, key)
    return _loc(text, rel, found[0], found[1]) if found else Location(rel)


def _value(text: str, rel: str, table: str | None, key: str) -> Location:
    found = _find(text, table, key)
    return _loc(text, rel, found[0], found[2]) if found else Location(rel)


__all__ = ["KEYS", "CsvFormat", "check_columns", "check_type", "parse", "read_format", "sidecar_of"]
