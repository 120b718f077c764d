"""``lakewrap ls``: what a project holds, read from its files alone (no lake is opened).

Three kinds of node (``docs/looking.md``):

- **models**: the ``models/**/*.sql`` files, each with its target, strategy, partitioning, tags,
  description, the tables it reads and its ``-- column`` contracts;
- **seeds**: the ``seeds/**/*.csv`` files, each with the table ``lakewrap seed`` loads it into;
- **sources**: the tables models read that neither a model nor a seed writes (loaded by something
  other than lakewrap), each with the models that read it.

Selectors (``lakewrap compile``'s: ``name``, ``+name``, ``tag:x``, ``state:modified`` ...) choose
models; seeds and sources are listed when no selector is given. :mod:`lakewrap.graph` draws the
same nodes with their edges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lakewrap import __version__
from lakewrap.project import Project
from lakewrap.spec import DynamicPartitioning, ModelSpec, TimePartitioning

SCHEMA_VERSION = 1
Kind = Literal["model", "seed", "source"]


@dataclass(frozen=True)
class Node:
    """One table of the project's DAG: written by a model or a seed, or read as a source."""

    key: str  # case-folded schema.name (DuckDB identifiers are case-insensitive)
    name: str  # schema.name as the model, seed file or first reader spells it
    kind: Kind
    path: str | None = None  # the model or seed file, relative to the project root
    spec: ModelSpec | None = None
    reads: tuple[str, ...] = ()  # keys of the tables this node reads (models only)
    read_by: tuple[str, ...] = ()  # names of the models reading it (seeds and sources)


@dataclass
class Listing:
    """The nodes a command looks at, models in dependency order, then seeds, then sources."""

    models: list[Node] = field(default_factory=list)
    seeds: list[Node] = field(default_factory=list)
    sources: list[Node] = field(default_factory=list)

    @property
    def nodes(self) -> list[Node]:
        return [*self.models, *self.seeds, *self.sources]

    def to_dict(self) -> dict[str, Any]:
        """The JSON document of ``lakewrap ls --format json`` (``docs/looking.md``, "JSON")."""
        names = {n.key: n.name for n in self.nodes}
        return {"schema_version": SCHEMA_VERSION, "lakewrap_version": __version__,
                "models": [model_dict(n, names) for n in self.models],
                "seeds": [{"target": n.name, "path": n.path, "read_by": list(n.read_by)} for n in self.seeds],
                "sources": [{"target": n.name, "read_by": list(n.read_by)} for n in self.sources]}


def partitioning_text(spec: ModelSpec) -> str | None:
    """The partitioning as its annotation reads (``daily key=created_at tz=UTC``); None: unpartitioned."""
    part = spec.partition
    if isinstance(part, TimePartitioning):
        words = [part.grain.value, f"key={part.key}", f"tz={part.tz}"]
        words += [f"start={part.start}"] if part.start else []
        words += [f"lookback={part.lookback}"] if part.lookback else []
        return " ".join(words)
    if isinstance(part, DynamicPartitioning):
        return f"dynamic key={part.key}"
    return None


def model_dict(node: Node, names: dict[str, str]) -> dict[str, Any]:
    spec = node.spec
    assert spec is not None
    return {"name": spec.name, "target": str(spec.target), "path": spec.path, "materialized": spec.materialized,
            "strategy": spec.strategy.kind, "partitioning": spec.partition.dump() if spec.partition else None,
            "tags": list(spec.tags), "description": spec.description,
            "upstreams": [names.get(k, k) for k in node.reads],
            "columns": [{"name": c.name, "type": c.type, "not_null": c.not_null, "description": c.description}
                        for c in spec.columns]}


def seed_tables(root: Path) -> list[tuple[str, str]]:
    """(``schema.name``, file) of every ``seeds/**/*.csv``, in file order; none without ``seeds/``.

    Only the names: the files are checked (and read) by ``lakewrap seed``.
    """
    from lakewrap.seedfiles import seed_target

    folder = root / "seeds"
    if not folder.is_dir():
        return []
    out = []
    for path in sorted(folder.rglob("*.csv")):
        schema, name = seed_target(root, path)
        out.append((f"{schema}.{name}", path.relative_to(root).as_posix()))
    return out


def whole(project: Project) -> Listing:
    """Every model, seed and source of ``project``."""
    models = project.order()
    written = {s.target.key for s in models}
    readers: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    for spec in models:
        for ref in spec.all_upstreams:
            if ref.key != spec.target.key:
                readers.setdefault(ref.key, []).append(str(spec.target))
                spelled.setdefault(ref.key, str(ref))
    listing = Listing(models=[model_node(s) for s in models])
    seen = set(written)
    for name, path in seed_tables(project.root):
        key = name.lower()
        if key in seen:  # a model writes it too (or a second file): the model is the node
            continue
        seen.add(key)
        listing.seeds.append(Node(key, name, "seed", path=path, read_by=tuple(readers.get(key, ()))))
    for key in sorted(set(readers) - seen):
        listing.sources.append(Node(key, spelled[key], "source", read_by=tuple(readers[key])))
    return listing


def model_node(spec: ModelSpec) -> Node:
    reads = tuple(dict.fromkeys(r.key for r in spec.all_upstreams if r.key != spec.target.key))
    return Node(spec.target.key, str(spec.target), "model", path=spec.path, spec=spec, reads=reads)


def load(root: Path) -> Project:
    """The project's models (parsed, or from the compile cache as ``compile`` reads them)."""
    from lakewrap.compile import load_project
    from lakewrap.compilecache import _Cache
    from lakewrap.project import require_project

    root = require_project(Path(root))
    cache = _Cache.open(root, True)
    project = load_project(root, cache)
    if cache is not None:
        cache.save()
    return project


def listing(root: Path, selectors: Sequence[str] = (), exclude: Sequence[str] = ()) -> Listing:
    """``lakewrap ls``: the selected models (in dependency order); with no selector also every seed
    and source. An empty selection is a usage error, as for every command that takes selectors."""
    return select(load(root), selectors, exclude)[0]


def select(project: Project, selectors: Sequence[str], exclude: Sequence[str]) -> tuple[Listing, Listing]:
    """(what ``ls`` lists, the whole project): the selected models, and with no selector every
    seed and source too."""
    from lakewrap.steps import refuse_empty

    everything = whole(project)
    selected = project.select(selectors, exclude)
    if selectors or exclude:
        refuse_empty(selected, selectors, exclude)
    keys = {s.target.key for s in selected}
    models = [n for n in everything.models if n.key in keys]
    if selectors:
        return Listing(models=models), everything
    return Listing(models=models, seeds=everything.seeds, sources=everything.sources), everything
