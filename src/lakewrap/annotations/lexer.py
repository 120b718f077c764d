"""Split one header line (``-- keyword arg key=value "quoted value"``) into located tokens.

The lexer knows nothing about keywords: it yields the keyword and a list of :class:`Arg` tokens,
each with its 1-based column, so that every later error can point at the exact text.
Quoting: ``"..."`` or ``'...'``; a doubled quote inside stands for itself (SQL style).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lakewrap.errors import AnnotationError, Location

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WORD_STOP = re.compile(r"[ \t\"']")  # the end of a word, or a quote inside it


@dataclass(frozen=True)
class Arg:
    """One argument: ``key`` is set for ``key=value`` forms; ``value`` is unquoted text."""

    value: str
    column: int
    key: str | None = None
    quoted: bool = False
    raw: str = ""


@dataclass(frozen=True)
class Annotation:
    """One lexed header line."""

    keyword: str
    args: tuple[Arg, ...]
    path: str
    line: int
    keyword_column: int
    text: str
    seen_keys: dict[str, Arg] = field(default_factory=dict, compare=False)

    def at(self, column: int | None = None) -> Location:
        """A :class:`Location` on this line (default: the keyword)."""
        return Location(self.path, self.line, column or self.keyword_column, self.text)

    def error(self, message: str, *, column: int | None = None, hint: str | None = None) -> AnnotationError:
        """An :class:`AnnotationError` located on this line."""
        return AnnotationError(f"`-- {self.keyword}`: {message}", location=self.at(column), hint=hint)

    @property
    def positional(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.key is None)

    @property
    def options(self) -> tuple[Arg, ...]:
        return tuple(a for a in self.args if a.key is not None)

    @property
    def end_column(self) -> int:
        return len(self.text.rstrip()) + 1


def _read_quoted(text: str, i: int, path: str, line: int) -> tuple[str, int]:
    """Read a quoted string starting at ``text[i]``; return (unquoted, index after it)."""
    quote = text[i]
    out: list[str] = []
    j = i + 1
    while (k := text.find(quote, j)) >= 0:
        out.append(text[j:k])
        if text.startswith(quote, k + 1):  # a doubled quote stands for itself
            out.append(quote)
            j = k + 2
            continue
        return "".join(out), k + 1
    raise AnnotationError(
        "unterminated quoted value",
        location=Location(path, line, i + 1, text),
        hint=f"close the value with {quote}",
    )


def lex_line(text: str, path: str, line: int) -> Annotation | None:
    """Lex a header line. Returns None for an empty comment (``--`` alone)."""
    stripped = text.lstrip()
    if not stripped.startswith("--"):
        raise AssertionError("header lines start with --")  # pragma: no cover
    i = len(text) - len(stripped) + 2  # columns count from the line as written, indentation included
    n = len(text)
    items: list[Arg] = []
    while True:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            break
        start = i
        key = None
        m = _KEY.match(text, i)
        if m is not None:
            key = m.group()[:-1]
            i = m.end()
        j = i
        while (stop := _WORD_STOP.search(text, j)) is not None and text[stop.start()] not in " \t":
            _, j = _read_quoted(text, stop.start(), path, line)  # a quote: the word goes on after it
        j = n if stop is None else stop.start()
        word = text[i:j]
        quoted = False
        if word[:1] in ("\"", "'"):
            unquoted, end = _read_quoted(text, i, path, line)
            if end == j:
                word, quoted = unquoted, True
        value = word
        i = j
        items.append(Arg(value=value, column=start + 1, key=key, quoted=quoted, raw=text[start:i]))
    if not items:
        return None
    head = items[0]
    if head.key is not None or head.quoted:
        raise AnnotationError(
            f"a header line must start with a keyword, not `{head.raw}`",
            location=Location(path, line, head.column, text),
            hint="write `-- keyword args...`; free-text notes belong in `-- description \"...\"` "
            "or in comments after the header",
        )
    return Annotation(
        keyword=head.value,
        args=tuple(items[1:]),
        path=path,
        line=line,
        keyword_column=head.column,
        text=text,
    )


_LIST_ITEM = re.compile(r'"((?:[^"]|"")*)"|([^,]+)')


def split_list(arg: Arg, ann: Annotation, what: str = "column") -> tuple[str, ...]:
    """Split ``a,b,"c d"`` into names; empty items are an error located on ``arg``."""
    text = arg.value
    item = f"{what} name" if what == "column" else what
    names: list[str] = []
    pos = 0
    while pos <= len(text):
        m = _LIST_ITEM.match(text, pos)
        if m is None:
            raise ann.error(
                f"empty {item} in `{arg.raw}`",
                column=arg.column,
                hint=f"write a comma-separated list of {what}s without spaces, e.g. `a,b`",
            )
        name = m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2).strip()
        if not name:
            raise ann.error(f"empty {item} in `{arg.raw}`", column=arg.column)
        names.append(name)
        pos = m.end()
        if pos == len(text):
            break
        if text[pos] != ",":
            raise ann.error(f"cannot read the {what} list `{arg.raw}`", column=arg.column)
        pos += 1
        if pos == len(text):
            raise ann.error(
                f"trailing comma in `{arg.raw}`", column=arg.column, hint="remove the trailing comma"
            )
    lowered = [n.lower() for n in names]
    for i, low in enumerate(lowered):
        if low in lowered[:i]:
            raise ann.error(f"{what} `{names[i]}` is listed twice", column=arg.column)
    return tuple(names)
