"""A project: its model files, their DAG, and selection over it.

Models live under ``<project>/models/``; paths that leave the project (``..``, absolute paths,
symlinks pointing outside) are refused. The DAG joins each model to the models that write the
tables it reads.
"""

from __future__ import annotations

import graphlib
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewrap.errors import Location, NotAProject, ProjectError, SelectionError, suggest
from lakewrap.spec import ModelSpec


def require_project(root: Path) -> Path:
    """``root`` resolved, when it is a lakewrap project: a folder holding ``models/``, ``lakewrap.toml``
    or the ``.lakewrap/`` lake that ``lakewrap.materialize(lake=folder)`` creates in a folder of its own.

    Commands that only read call this first, so a wrong ``--project`` creates nothing (no
    ``.lakewrap/``, no ``target/``) and is named with what is missing (:class:`NotAProject`, exit 2).
    """
    if not root.exists():
        raise NotAProject(f"project folder `{root}` does not exist",
                          hint="pass --project DIR of a lakewrap project (a folder holding models/)")
    if not root.is_dir():
        raise NotAProject(f"`{root}` is not a folder", hint="pass --project DIR of a lakewrap project")
    if not any(marker.exists() for marker in (root / "models", root / "lakewrap.toml", root / ".lakewrap")):
        raise NotAProject(f"`{root}` is not a lakewrap project: it has neither a models/ folder nor a lakewrap.toml"
                          " (nor the .lakewrap/ lake of lakewrap.materialize)",
                          hint="run lakewrap in the project folder, or pass --project DIR")
    return root.resolve()


def discover(root: Path) -> list[Path]:
    """Every ``models/**/*.sql`` file, sorted; refuses files that resolve outside the project."""
    return [path for path, _ in model_files(root)]


def model_files(root: Path) -> list[tuple[Path, str]]:
    """:func:`discover`, each file with its resolved path relative to the resolved root.

    The relative path is what :func:`lakewrap.parse.parse_model` names the model. Resolving costs a
    ``stat`` per path component; a folder is resolved once and a file that is not a symlink is its
    resolved folder plus its name.
    """
    models = root / "models"
    if not models.is_dir():
        raise ProjectError(
            f"no models/ folder in the project `{root.name or root}`",
            hint="run from the project folder or pass --project DIR; models live in models/<schema>/<name>.sql",
        )
    found: list[tuple[Path, str]] = []
    real_root = os.path.realpath(root)
    prefix = real_root.rstrip(os.sep) + os.sep
    real_dirs: dict[str, str] = {}
    for path in sorted(models.rglob("*.sql")):
        text = str(path)
        folder, name = os.path.split(text)
        if os.path.islink(text):
            real = os.path.realpath(text)
        else:
            real_dir = real_dirs.get(folder)
            if real_dir is None:
                real_dir = real_dirs[folder] = os.path.realpath(folder)
            real = os.path.join(real_dir, name)
        if real != real_root and not real.startswith(prefix):
            rel = path.relative_to(root).as_posix()
            raise ProjectError(
                f"{rel} resolves outside the project (a symlink?)",
                location=Location(rel),
                hint="keep model files inside the project folder",
            )
        found.append((path, real[len(prefix):].replace(os.sep, "/") if real != real_root else "."))
    return found


_METHODS = ("tag", "path", "state")  # selector methods, `<method>:<value>`


@dataclass
class Project:
    """The parsed models of one project, indexed by target table."""

    root: Path
    models: dict[str, ModelSpec] = field(default_factory=dict)  # by target key
    # what a lake recorded, by environment, once a `state:` selector asked (lakewrap.state_select)
    states: dict[str | None, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, root: Path, *, paths: Iterable[Path] | None = None) -> Project:
        """Parse every model; duplicate targets are an error naming both files."""
        root = root.resolve()
        project = cls(root)
        from lakewrap.parse import parse_model

        for path in paths if paths is not None else discover(root):
            spec = parse_model(path, root)
            other = project.models.get(spec.target.key)
            if other is not None:
                raise ProjectError(
                    f"two models write `{spec.target}`: {other.path} and {spec.path}",
                    location=Location(spec.path),
                    hint="rename one of the files or give it a `-- target`",
                )
            project.models[spec.target.key] = spec
        if paths is None:
            from lakewrap.pyfiles import add_to

            add_to(project, save=False)  # models/**/*.py and registered functions (docs/python-models.md)
        return project

    def upstream_models(self, spec: ModelSpec) -> list[ModelSpec]:
        """The models writing tables that ``spec`` reads (external tables are not models)."""
        return [self.models[u.key] for u in spec.all_upstreams if u.key in self.models]

    def order(self, selected: Iterable[ModelSpec] | None = None) -> list[ModelSpec]:
        """Models in dependency order (upstream first); a cycle is an error that prints the cycle."""
        chosen = {s.target.key for s in (selected if selected is not None else self.models.values())}
        sorter: graphlib.TopologicalSorter[str] = graphlib.TopologicalSorter()
        for key in sorted(self.models):
            spec = self.models[key]
            sorter.add(key, *sorted(u.target.key for u in self.upstream_models(spec)))
        try:
            ordered = list(sorter.static_order())
        except graphlib.CycleError as exc:
            cycle = exc.args[1]
            names = " -> ".join(self.models[k].path for k in reversed(cycle))
            raise ProjectError(
                f"the models form a cycle: {names}",
                hint="break the cycle: one of these models must not read another's table",
            ) from None
        return [self.models[k] for k in ordered if k in chosen]

    def downstream(self) -> dict[str, set[str]]:
        down: dict[str, set[str]] = {k: set() for k in self.models}
        for key, spec in self.models.items():
            for up in self.upstream_models(spec):
                down[up.target.key].add(key)
        return down

    # --- selection --------------------------------------------------------------------------------

    def select(self, selectors: Iterable[str] = (), exclude: Iterable[str] = ()) -> list[ModelSpec]:
        """Models matching any selector (all when none), minus excluded ones, in DAG order.

        Grammar: ``name``, ``schema.name``, ``+name`` (with upstreams), ``name+`` (with
        downstreams), ``tag:x``, ``path:models/x`` (a file or folder), ``state:modified`` and
        ``state:new`` (:mod:`lakewrap.state_select`); selectors are unioned.
        """
        sels = list(selectors)
        keys = set(self.models) if not sels else set().union(*(self._match(s) for s in sels))
        for s in exclude:
            keys -= self._match(s)
        return self.order([self.models[k] for k in keys])

    def _match(self, selector: str) -> set[str]:
        text = selector.strip()
        up = text.startswith("+")
        down = text.endswith("+") and len(text) > 1
        core = text.removeprefix("+").removesuffix("+") if down else text.removeprefix("+")
        if not core:
            raise SelectionError(f"empty selector `{selector}`", hint="write a model name, tag:x or path:models/x")
        if core.startswith("tag:"):
            tag = core[4:]
            base = {k for k, s in self.models.items() if tag in s.tags}
            if not base:
                tags = sorted({t for s in self.models.values() for t in s.tags})
                raise SelectionError(f"no model has tag `{tag}`",
                                     hint=f"tags in this project: {', '.join(tags) or '(none)'}")
        elif core.startswith("state:"):
            from lakewrap.state_select import match

            base = match(self, core[6:])
        elif core.startswith("path:"):
            want = core[5:].strip("/")
            if want.startswith("/") or ".." in want.split("/"):
                raise SelectionError(f"path selector `{core}` must stay inside the project")
            base = {k for k, s in self.models.items() if s.path == want or s.path.startswith(want + "/")}
            if not base:
                raise SelectionError(f"no model under `{want}`", hint="write path:models/<folder or file>")
        elif ":" in core and not core.split(":", 1)[0].count("."):
            method = core.split(":", 1)[0]
            close = suggest(method, list(_METHODS))
            raise SelectionError(f"unknown selector method `{method}:` in `{core}`",
                                 hint=(f"did you mean `{close}:`? " if close else "")
                                 + "the methods are " + ", ".join(f"{m}:" for m in _METHODS))
        else:
            base = self._by_name(core)
        keys = set(base)
        if up:
            keys |= self._closure(base, lambda k: {u.target.key for u in self.upstream_models(self.models[k])})
        if down:
            graph = self.downstream()
            keys |= self._closure(base, lambda k: graph[k])
        return keys

    def _by_name(self, name: str) -> set[str]:
        low = name.lower().removesuffix(".sql")
        if "." in low:
            if low in self.models:
                return {low}
        else:
            hits = {k for k, s in self.models.items() if s.name.lower() == low}
            if hits:
                return hits
        names = sorted({s.name for s in self.models.values()} | {str(s.target) for s in self.models.values()})
        close = suggest(name, names)
        raise SelectionError(
            f"no model matches `{name}`",
            hint=(f"did you mean `{close}`? " if close else "") + "select by name, schema.name, tag:x or path:models/x",
        )

    @staticmethod
    def _closure(start: set[str], step: object) -> set[str]:
        seen: set[str] = set()
        todo = list(start)
        while todo:
            k = todo.pop()
            for n in step(k):  # type: ignore[operator]
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen
