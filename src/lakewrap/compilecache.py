"""The compile cache: a project's parsed specs and compiled templates, by model file, in
``target/cache/compile-v1.json`` (:mod:`lakewrap.compile` reads and fills it).

Compiled SQL does not depend on the partition value (windows are bound parameters), so a model's
statements are kept as templates keyed by the sha256 of its file; the whole cache is keyed by
lakewrap's version and a fingerprint of its own source files and of sqlglot's
(:func:`lakewrap.targetdir.code_key`), so an upgrade or an edit to a compiler never serves stale
SQL. The statements the executor remembers (:mod:`lakewrap.execute.statements`) ride in its header.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap import __version__
from lakewrap.execute import statements
from lakewrap.targetdir import code_key, write_atomic

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan
    from lakewrap.plan import Plan

CACHE_FILE = Path("target") / "cache" / "compile-v1.json"
CACHE_FORMAT = 4
# A template: a CompiledPlan dumped to JSON without its window, each statement's params as names.
Template = dict[str, Any]


# --- the cache ------------------------------------------------------------------------------------


@dataclass
class _Entry:
    """One model in the cache: its file's hash, its spec and its compiled templates, as JSON text.

    ``line`` is the entry exactly as read from the cache file, written back verbatim while the
    entry is unchanged, so saving after a one-file edit does not re-encode the other models.
    ``plans_json`` is the templates' JSON text, as read or as a worker encoded it; None once
    :meth:`add` changed them.
    """

    sha: str
    spec_json: str | None = None
    plans_json: str | None = None
    line: str | None = None
    _plans: dict[str, Template] | None = None

    @property
    def plans(self) -> dict[str, Template]:
        """Templates by plan key (decoded on first use)."""
        if self._plans is None:
            try:
                plans = json.loads(self.plans_json) if self.plans_json else {}
            except ValueError:
                plans = None
            self._plans = plans if isinstance(plans, dict) else {}
        return self._plans

    def add(self, key: str, template: Template) -> None:
        self.plans[key] = template
        self.plans_json = None
        self.line = None

    def encode(self, rel: str) -> str:
        if self.line is None:
            plans = self.plans_json if self.plans_json is not None else _json_text(self.plans)
            self.line = "\t".join((json.dumps(rel), self.sha, self.spec_json or "null", plans))
        return self.line


def _json_text(templates: dict[str, Template]) -> str:
    return json.dumps(templates, separators=(",", ":"))


@dataclass
class _Cache:
    """Parsed specs and compiled templates of a project's models, by model path.

    The file holds a JSON header line, then one line per model: ``"<path>"<TAB>sha256<TAB><spec
    JSON><TAB><templates JSON>`` (JSON text never holds a raw tab or newline). ``path`` is None for
    a cache kept in memory only (``--no-cache``): it is never read or written.
    """

    path: Path | None
    entries: dict[str, _Entry]
    key: str = ""
    dirty: bool = False
    # Plans compiled in this process while loading, by (model path, plan key): used once, never saved.
    ready: dict[tuple[str, str], tuple[Plan, CompiledPlan]] = field(default_factory=dict)

    @classmethod
    def open(cls, root: Path, enabled: bool) -> _Cache | None:
        if not enabled:
            return None
        path = root / CACHE_FILE
        key = code_key()
        entries: dict[str, _Entry] = {}
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
            header = json.loads(lines[0])
            if header.get("format") != CACHE_FORMAT or header.get("key") != key:
                raise ValueError
            statements.preload(header.get("statements"))
            for line in lines[1:]:
                parts = line.split("\t", 3)
                if len(parts) == 4:
                    rel = json.loads(parts[0])
                    if isinstance(rel, str):
                        entries[rel] = _Entry(parts[1], parts[2], parts[3], line)
        except (OSError, ValueError, TypeError, AttributeError):
            pass  # no cache, another version's, or damaged: start cold (what was read is kept)
        return cls(path, entries, key)

    @classmethod
    def memory(cls) -> _Cache:
        return cls(None, {})

    def save(self) -> None:
        """Write the cache if a model or a remembered statement (:mod:`~lakewrap.execute.statements`) changed."""
        texts, added = statements.remembered()
        if not (self.dirty or added) or self.path is None:
            return
        header = json.dumps({"format": CACHE_FORMAT, "version": __version__, "key": self.key, "statements": texts})
        text = "\n".join([header, *(e.encode(rel) for rel, e in self.entries.items())])
        try:
            write_atomic(self.path, text)
            self.dirty = False
            statements.saved()
        except OSError:
            pass  # a read-only project still compiles; it just stays cold
