"""One error hierarchy for everything lakewrap reports to a user.

Every error a user can cause carries *where* (file, line, column, the offending text), *what*
(the message) and *how to fix it* (a hint, often a close-match suggestion or the list of valid
values). The CLI maps :class:`LakewrapError` to a one-line red message and an exit code; anything
else is a bug and shows a traceback.

Families mirror the phases: :class:`ModelError` (a model file is wrong), :class:`ConfigError`
(project configuration), :class:`PlanError` (a valid model asked for an impossible plan, e.g. a bad
partition value), :class:`UnsupportedError` (the substrate cannot honour an option), :class:`StateError`
and :class:`ExecutionError` (running against a lake). :class:`Retryable` marks errors a runner may
retry; everything else is terminal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Location:
    """Where in a file an error is: 1-based line and column, plus the line's text."""

    path: str
    line: int | None = None
    column: int | None = None
    snippet: str | None = None

    def __str__(self) -> str:
        out = self.path
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        return out


class LakewrapError(Exception):
    """Base of every error lakewrap raises on purpose.

    Args:
        message: What is wrong, in one sentence.
        location: Where it is wrong, when it comes from a file.
        hint: What to do about it.
    """

    exit_code = 1
    kind = "error"

    def __init__(self, message: str, *, location: Location | None = None, hint: str | None = None):
        from lakewrap.redact import redact

        # the one redactor again, for an error raised where no lake was at hand to redact it
        self.message = redact(message)
        self.location = location
        self.hint = redact(hint) if hint else hint
        super().__init__(self.render())

    def render(self) -> str:
        """The full user-facing text: ``path:line:col: message``, the snippet, then the hint
        (every secret the environment holds masked, :mod:`lakewrap.redact`)."""
        from lakewrap.redact import redact

        head = f"{self.location}: {self.message}" if self.location else self.message
        parts = [head]
        loc = self.location
        if loc is not None and loc.snippet is not None:
            parts.append(f"    {loc.snippet}")
            if loc.column is not None:
                parts.append("    " + " " * (loc.column - 1) + "^")
        if self.hint:
            parts.append(f"hint: {self.hint}")
        return redact("\n".join(parts))

    def to_dict(self) -> dict[str, object]:
        """A JSON-friendly form for ``--format json`` consumers."""
        loc = self.location
        return {
            "error": type(self).__name__,
            "message": self.message,
            "path": loc.path if loc else None,
            "line": loc.line if loc else None,
            "column": loc.column if loc else None,
            "hint": self.hint,
        }


class ModelError(LakewrapError):
    """A model file is malformed: its header, its SQL, or how they fit together."""


class AnnotationError(ModelError):
    """A header annotation is unknown, incomplete or has a bad value."""


class SqlError(ModelError):
    """The model body is not the SQL the model kind requires."""


class ConfigError(LakewrapError):
    """Project configuration (``lakewrap.toml``, paths, selectors) is invalid."""


class SelectionError(ConfigError):
    """A selector matched nothing or cannot be parsed."""


class ProjectError(ConfigError):
    """The project as a whole is inconsistent: cycles, two models writing one table, ..."""


class NotAProject(ConfigError):
    """A command that only reads was pointed at a folder that is not a lakewrap project (exit code 2)."""

    exit_code = 2


class PlanError(LakewrapError):
    """A valid model was asked for a plan that cannot exist (bad partition value, ...)."""


class UnsupportedError(LakewrapError):
    """The substrate cannot honour what the model asks for."""


class StateError(LakewrapError):
    """lakewrap's recorded state is missing or disagrees with the lake."""


class NoLake(StateError):
    """A command that only reads found no lake: nothing was seeded or run yet (exit code 2)."""

    exit_code = 2


class ExecutionError(LakewrapError):
    """A statement failed while running against a lake."""


class Retryable:
    """Mixin: the operation may succeed if the whole transaction is retried."""


class TransientExecutionError(ExecutionError, Retryable):
    """A conflict or busy catalog: retrying the whole transaction may succeed."""


def suggest(word: str, candidates: Iterable[str]) -> str | None:
    """Return the closest candidate to ``word`` (for "did you mean ...?" hints), if any is close."""
    import difflib

    matches = difflib.get_close_matches(word.lower(), [c.lower() for c in candidates], n=1, cutoff=0.6)
    if not matches:
        return None
    lowered = {c.lower(): c for c in candidates}
    return lowered[matches[0]]


def choices_hint(word: str, candidates: Iterable[str], noun: str = "value") -> str:
    """A hint that suggests a close match and lists all valid values."""
    options = sorted(candidates)
    close = suggest(word, options)
    listed = ", ".join(f"`{o}`" for o in options)
    prefix = f"did you mean `{close}`? " if close is not None else ""
    return f"{prefix}valid {_plural(noun)}: {listed}"


def _plural(noun: str) -> str:
    if noun.endswith("y") and noun[-2:-1] not in "aeiou":
        return noun[:-1] + "ies"
    return noun if noun.endswith("s") else noun + "s"


def relpath(path: Path, root: Path | None) -> str:
    """Show ``path`` relative to ``root`` when possible (errors never print machine paths)."""
    if root is not None:
        try:
            return path.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            pass
    return path.as_posix()
