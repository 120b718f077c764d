"""Where in the model file a runtime error is: DuckDB's ``LINE n`` + caret mapped back by tokens.

DuckDB reports catalog, binder and conversion errors against the statement it ran, a statement
lakewrap rendered around the user's SELECT (``CREATE TEMP TABLE ... AS SELECT ...``, a ``MERGE``,
a column probe). This module turns such an error into a :class:`LocatedError` on the model file:

1. the caret (``LINE n: <text>`` then ``^``) gives a character offset in the executed statement;
2. both the statement and the model file are split into tokens by DuckDB's own tokenizer
   (``duckdb.tokenize``; comments, hence the header, are skipped), each normalized (quotes
   stripped, identifiers and keywords lower-cased), so ``raw."order"`` and ``raw.order`` agree;
3. the two token sequences are aligned (``difflib.SequenceMatcher``, longest common runs first),
   so the caret's token maps to the token *at the same place* of the user's text, not to another
   occurrence of the same word. A caret between aligned runs takes the same word in the matching
   gap of the file, or the gap itself when it lies on one line; a caret on lakewrap's own text
   (outside the aligned span) has no file position.

Where no position can be found, the error names the model file and the statement's role, never a
guessed line. Guard failures (``lakewrap guard: ...``, ``lakewrap contract: ...``) point at the
header line that declared the rule; data-test failures at their ``-- test`` line.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from difflib import Match
from itertools import pairwise
from pathlib import Path
from typing import Any

from lakewrap.annotations.lexer import Annotation, Arg, lex_line
from lakewrap.compilers.artifacts import CompiledPlan
from lakewrap.errors import ExecutionError, LakewrapError, Location

__all__ = ["LocatedError", "Token", "caret_offset", "located", "location_dict", "map_offset", "output_column",
           "remember", "tokens"]

# DuckDB's error context (QueryErrorContext::Format): "\n\nLINE <n>: [...]<text>[...]\n<spaces>^"
_CONTEXT = re.compile(r"\n*LINE (\d+): (.*)\n( *)\^[ \t]*$")
_QUOTED = re.compile(r"\"(?:[^\"]|\"\")*\"|'(?:[^']|'')*'")
_WORD_END = re.compile(r"\s|--|/\*")
_SYSTEM = re.compile(r'"(pg_catalog|information_schema|system|temp)\.')  # DuckDB's own tables: no help
_COLUMN = re.compile(r"^Column '([^']+)' has an unsupported type")  # pyiceberg's schema conversion
_NEAR = 3  # ... and shorter runs this close to them, too
_CORE = 3  # aligned runs at least this long anchor the user's text inside the statement


class LocatedError(ExecutionError):
    """A runtime error reported on the model file; ``debug`` holds what ``--debug`` shows."""

    def __init__(self, message: str, *, location: Location | None = None, hint: str | None = None,
                 debug: str = ""):
        super().__init__(message, location=location, hint=hint)
        self.debug = debug


@dataclass(frozen=True)
class Token:
    """One token: ``text[start:end]``, and its normalized form for comparison."""

    start: int
    end: int
    norm: str


def tokens(text: str) -> list[Token]:
    """``text`` split by DuckDB's tokenizer (comments skipped), each token normalized."""
    import duckdb

    try:
        starts = [int(s) for s, _ in duckdb.tokenize(text)]
    except Exception:  # the tokenizer gave up (it should not on text DuckDB ran): no tokens, no mapping
        return []
    if not text.isascii():  # DuckDB counts bytes of UTF-8; Python strings count characters
        chars = [i for i, c in enumerate(text) for _ in range(len(c.encode("utf-8")))]
        starts = [chars[b] for b in starts if b < len(chars)]
    out: list[Token] = []
    for i, start in enumerate(starts):
        stop = starts[i + 1] if i + 1 < len(starts) else len(text)
        quoted = _QUOTED.match(text, start)
        if quoted is not None and quoted.end() <= stop:
            raw = quoted.group()
            norm = raw[1:-1].replace('""', '"').lower() if raw[0] == '"' else raw
        else:
            raw = _WORD_END.split(text[start:stop], maxsplit=1)[0]
            norm = raw.lower()
        if raw:
            out.append(Token(start, start + len(raw), norm))
    return out


def caret_offset(message: str, statement: str) -> int | None:
    """The character offset in ``statement`` that DuckDB's ``LINE n`` + caret point at, if any.

    DuckDB shows the error's line, cut to about 80 characters around the error with ``...`` on
    a cut side, and puts the caret under the error's character.
    """
    m = _CONTEXT.search(message.rstrip())
    if m is None:
        return None
    number, shown, spaces = int(m.group(1)), m.group(2), len(m.group(3))
    lines = statement.splitlines(keepends=True)
    if not 1 <= number <= len(lines):
        return None
    line = lines[number - 1].rstrip("\r\n")
    at = spaces - len(f"LINE {number}: ")
    begin = 0
    if shown.startswith("...") and not line.startswith("..."):
        shown, at = shown[3:], at - 3
        begin = line.find(shown.removesuffix("...")) if shown else -1
        if begin < 0:
            return None
    if not 0 <= at <= len(line) - begin:
        return None
    return sum(len(s) for s in lines[: number - 1]) + begin + at


def map_offset(statement: str, offset: int, source: str) -> int | None:
    """The offset in ``source`` (the model file) of the text at ``statement[offset]``, or None."""
    from difflib import SequenceMatcher

    ran, mine = tokens(statement), tokens(source)
    at = next((i for i, t in enumerate(ran) if t.end > offset), None)
    if at is None or not mine:
        return None
    matcher = SequenceMatcher(None, [t.norm for t in ran], [t.norm for t in mine], autojunk=False)
    blocks = [b for b in matcher.get_matching_blocks() if b.size]
    core = [i for i, b in enumerate(blocks) if b.size >= _CORE] or [max(range(len(blocks)),
                                                                         key=lambda i: blocks[i].size, default=-1)]
    if core[0] < 0:
        return None
    first, last = core[0], core[-1]
    # shorter runs join the span while they stay close to it on both sides (a rewritten `x::INT`);
    # runs farther out are words lakewrap's own text happens to share with the file
    while first > 0 and _near(blocks[first - 1], blocks[first]):
        first -= 1
    while last + 1 < len(blocks) and _near(blocks[last], blocks[last + 1]):
        last += 1
    blocks = blocks[first:last + 1]
    if not blocks[0].a <= at < blocks[-1].a + blocks[-1].size:
        return None  # lakewrap's own text around the user's SELECT
    for b in blocks:
        if b.a <= at < b.a + b.size:
            return mine[b.b + at - b.a].start
    before = max((b for b in blocks if b.a + b.size <= at), key=lambda b: b.a)
    after = min((b for b in blocks if b.a > at), key=lambda b: b.a)
    gap = mine[before.b + before.size:after.b]
    same = [t for t in gap if t.norm == ran[at].norm]
    if same:  # the same word in the matching gap: the one at the same ordinal among its repeats
        nth = sum(1 for t in ran[before.a + before.size:at] if t.norm == ran[at].norm)
        return same[min(nth, len(same) - 1)].start
    left, right = mine[before.b + before.size - 1], mine[after.b]
    if "\n" in source[left.start:right.start]:
        return None  # a rewritten region over several lines: no line would be certain
    return (gap[0] if gap else right).start


def _near(left: Match, right: Match) -> bool:
    """Whether two aligned runs are separated by at most a few tokens on both sides."""
    return right.a - (left.a + left.size) <= _NEAR and right.b - (left.b + left.size) <= _NEAR


def located(exc: BaseException, path: str, root: Path | None, *, compiled: CompiledPlan | None = None,
            redact: Callable[[str], str] = lambda s: s) -> LakewrapError:
    """The error to report for ``exc``, raised while running the model file ``path`` (under ``root``).

    The statement that raised it is the one :func:`remember` attached (``StatementLog.run`` does);
    ``compiled`` names its role.

    A :class:`LakewrapError` that already has a location gets the line's text and a column; any
    other error becomes a :class:`LocatedError` on the model file, with DuckDB's message, a hint,
    and (in ``debug``) the statement, DuckDB's full message and the traceback.
    """
    source = _read(root, path) if path.endswith(".sql") else None  # a seed's CSV has no SQL to point at
    statement, given = getattr(exc, _STATEMENT, (None, None))
    if isinstance(exc, LakewrapError):
        loc = exc.location
        if loc is not None and loc.path == path and loc.snippet is None and source is not None:
            exc.location = _on_line(source, loc)
            exc.args = (exc.render(),)
        return exc
    text = str(exc).strip() or type(exc).__name__
    if path.endswith(".csv"):  # a seed's value that does not read: at the CSV's line and column
        from lakewrap.seederrors import csv_error

        if (bad := csv_error(text, root, path)) is not None:
            return bad
    own = next((st for st in compiled.statements if st.sql == statement), None) if compiled else None
    role = given or (own.role if own is not None else ("lakewrap" if statement is not None else None))
    debug = redact(_debug(exc, text, statement, role))
    guard = _guard(text, path, source, debug)
    if guard is not None:
        return guard
    message, hint = _split(text)
    location: Location | None = None
    ran = getattr(exc, _EXECUTED, statement)  # DuckDB's caret points into the text it ran
    at = caret_offset(text, ran) if ran is not None and source is not None and role in _EMBEDS else None
    if at is not None and (mapped := map_offset(ran or "", at, source or "")) is not None:
        location = _offset_location(source or "", mapped, path)
    if location is None and source is not None and (named := _COLUMN.search(message)) is not None:
        location = _output_column(source, path, named.group(1))  # e.g. pyiceberg's schema conversion
        if location is not None and hint is None:
            hint = "cast the column in the SELECT to a type the table format supports"
    if location is None and own is not None and own.test is not None and source is not None:
        location = _on_line(source, Location(path, own.test.line))  # a test that could not run
    if location is None:  # DuckDB's whole message then (but its LINE of lakewrap's statement)
        first, *rest = _CONTEXT.sub("", text).strip().splitlines() or [message]
        if role is not None:
            first = f"{first} (in a {role} statement lakewrap ran; `lakewrap --debug` shows it)"
        message = "\n".join([first, *rest])
        location = Location(path)
    return LocatedError(message, location=location, hint=hint, debug=debug)


def location_dict(err: LakewrapError) -> dict[str, Any] | None:
    """``{"path", "line", "column"}`` of an error, for JSON results; None without a location."""
    loc = err.location
    return None if loc is None else {"path": loc.path, "line": loc.line, "column": loc.column}


# --- guards -----------------------------------------------------------------------------------

# (text in the guard's message, the header keyword that declared the rule, its option, hint)
_GUARDS: tuple[tuple[str, str, str | None, str], ...] = (
    ("outside the partition window", "partitioned", "key",
     "keep the rows inside the window: filter the SELECT with `WHERE {col} >= $partition_start AND "
     "{col} < $partition_end`"),
    ("a NULL unique_key", "unique_key", None, "drop or fill the NULL keys in the SELECT (`WHERE {col} IS NOT NULL`)"),
    ("occur more than once", "unique_key", None,
     "keep one row per key: add `dedupe=latest_by(<col>)` to the `-- unique_key` line (the row with the "
     "greatest <col> wins), or remove the duplicates in the SELECT"),
    ("rows have a NULL", "snapshot", "updated_at", "drop or fill the NULL `{col}` values in the SELECT"),
)
_CONTRACT_LINE = re.compile(r"lakewrap contract: (?P<path>[^:]+):(?P<line>\d+): ")


def _guard(text: str, path: str, source: str | None, debug: str) -> LakewrapError | None:
    """A guard's or a contract's failure, on the header line that declared the rule."""
    if "lakewrap contract: " in text:
        body = text.split("lakewrap contract: ", 1)[1].split("\n", 1)[0].strip()
        m = _CONTRACT_LINE.search(text)
        loc = Location(path, int(m.group("line"))) if m else _annotation(source, path, "column", None)
        if loc is not None and source is not None:
            loc = _on_line(source, loc)
        return LocatedError(f"contract violated: {body}", location=loc or Location(path),
                            hint="cast the column in the SELECT, or change its `-- column` line", debug=debug)
    if "lakewrap guard: " not in text:
        return None
    body = text.split("lakewrap guard: ", 1)[1].split("\n", 1)[0].strip()
    for needle, keyword, option, hint in _GUARDS:
        if needle not in body:
            continue
        loc = _annotation(source, path, keyword, option)
        col = _annotation_value(source, path, keyword, option)
        if loc is None and keyword == "unique_key":  # an SCD2 snapshot's key (it has no dedupe= option)
            loc = _annotation(source, path, "snapshot", "unique_key")
            col = _annotation_value(source, path, "snapshot", "unique_key")
            hint = hint.replace("add `dedupe=latest_by(<col>)` to the `-- unique_key` line (the row with "
                                "the greatest <col> wins), or remove", "remove")
        if col is None or "," in col:
            hint = re.sub(r" \(`WHERE \{col\} IS NOT NULL`\)", "", hint)
        return LocatedError(f"{body}; nothing was written", location=loc or Location(path),
                            hint=hint.format(col=col or "<col>"), debug=debug)
    return LocatedError(f"{body}; nothing was written", location=Location(path), debug=debug)


def _annotations(source: str | None, path: str) -> list[Annotation]:
    if source is None:
        return []
    from lakewrap.parse import split_header

    out: list[Annotation] = []
    for number, line in split_header(source)[0]:
        try:
            ann = lex_line(line, path, number)
        except LakewrapError:
            continue
        if ann is not None:
            out.append(ann)
    return out


def _find(source: str | None, path: str, keyword: str, option: str | None) -> tuple[Annotation, Arg | None] | None:
    for ann in _annotations(source, path):
        if ann.keyword != keyword:
            continue
        arg = next((a for a in ann.args if a.key == option), None) if option else next(iter(ann.positional), None)
        if option is None or arg is not None:
            return ann, arg
    return None


def _annotation(source: str | None, path: str, keyword: str, option: str | None) -> Location | None:
    """The header line ``-- <keyword>`` (at its ``option=`` when given), or None."""
    found = _find(source, path, keyword, option)
    if found is None:
        return None
    ann, arg = found
    return ann.at(arg.column if arg is not None else None)


def _annotation_value(source: str | None, path: str, keyword: str, option: str | None) -> str | None:
    found = _find(source, path, keyword, option)
    return found[1].value if found is not None and found[1] is not None else None


# --- text -------------------------------------------------------------------------------------


def _output_column(source: str, path: str, name: str) -> Location | None:
    """Where the SELECT names its output column ``name`` (``AS name``), when it does so once."""
    toks = tokens(source)
    found = [b for a, b in pairwise(toks) if a.norm == "as" and b.norm == name.lower()]
    return _offset_location(source, found[0].start, path) if len(found) == 1 else None


output_column = _output_column  # the one way to find where a SELECT names an output column


def _read(root: Path | None, path: str) -> str | None:
    file = Path(path) if root is None else root / path
    try:
        return file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _offset_location(source: str, offset: int, path: str) -> Location:
    line = source.count("\n", 0, offset) + 1
    start = source.rfind("\n", 0, offset) + 1
    end = source.find("\n", offset)
    return Location(path, line, offset - start + 1, source[start:end if end >= 0 else len(source)].rstrip("\r"))


def _on_line(source: str, loc: Location) -> Location:
    """``loc`` with its line's text, and the first non-blank column when it had none."""
    lines = source.splitlines()
    if loc.line is None or not 1 <= loc.line <= len(lines):
        return loc
    text = lines[loc.line - 1]
    column = loc.column
    if column is None:
        column = len(text) - len(text.lstrip()) + 1
        if text.lstrip().startswith("--"):  # a header line: at its keyword
            rest = text.lstrip()[2:]
            column += 2 + len(rest) - len(rest.lstrip())
    return Location(loc.path, loc.line, column, text)


def _split(text: str) -> tuple[str, str | None]:
    """DuckDB's message → (its first line, a hint from its candidates or "did you mean")."""
    body = _CONTEXT.sub("", text).strip()
    first, *rest = body.splitlines() or [text]
    hint = None
    for line in rest:
        line = line.strip()
        if line.startswith("Candidate bindings:"):
            names = line.split(":", 1)[1].strip()
            hint = f"did you mean {names.split(', ')[0]}? (candidates: {names})"
        elif line.lower().startswith("did you mean") and not _SYSTEM.search(line):
            hint = line[0].lower() + line[1:]
    if hint is None:
        hint = _default_hint(first)
    return first, hint


def _default_hint(message: str) -> str | None:
    if message.startswith("Conversion Error"):
        return "cast the value explicitly (TRY_CAST gives NULL instead of failing) or fix the data"
    if message.startswith("Catalog Error") and "does not exist" in message:
        return "check the name; a table must be seeded or built by an upstream model before this one runs"
    if message.startswith("Binder Error"):
        return "check the names and types the SELECT uses"
    return None


def _debug(exc: BaseException, text: str, statement: str | None, role: str | None) -> str:
    parts = []
    if statement is not None:
        parts.append(f"statement ({role}):\n{statement}")
    parts.append(f"{type(exc).__name__}: {text}")
    parts.append("".join(traceback.format_exception(exc)).rstrip())
    return "\n\n".join(parts)


_STATEMENT = "lakewrap_statement"
_EXECUTED = "lakewrap_executed"
# the roles of statements that embed the user's SELECT (or, literal, are the user's text): only their
# carets are mapped; a guard, test or state statement shares words with the file by coincidence only
_EMBEDS = frozenset({"stage", "bootstrap", "write", "literal", "schema", "probe"})


def remember(exc: BaseException, statement: str, role: str | None = None, *, executed: str | None = None) -> None:
    """Attach the statement that raised ``exc`` (and its role) to it, for :func:`located`;
    ``executed``: the text DuckDB ran when it differs (parameters written in as literals)."""
    with suppress(AttributeError, TypeError):  # an exception type without a __dict__: no statement known
        setattr(exc, _STATEMENT, (statement, role))
        if executed is not None and executed != statement:
            setattr(exc, _EXECUTED, executed)
