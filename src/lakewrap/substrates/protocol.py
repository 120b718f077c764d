"""The substrate protocol: what every lake lakewrap writes to provides, one role each.

A substrate is one object (:class:`Substrate`); :mod:`lakewrap.substrates.registry` resolves
``lakewrap.toml``'s ``[lake]`` to it in exactly one place. The commands (compile, run, backfill,
resume, seed, status, history, query, explain, reproduce, restore, maintain, test, ``run --stale``)
ask it for a role and never branch on the substrate's name:

- config (:attr:`Substrate.config_class`): the record ``[lake]`` is validated into when it names
  the substrate (``lakewrap.config`` builds its tagged union from the registry);
- compiler (:meth:`Substrate.compiler`): the pure compiler; its ``Capabilities`` say what the
  substrate can do;
- lake handle (:meth:`Substrate.open`): a :class:`LakeHandle` (connect, close, redact, existence);
- materializer (:meth:`Substrate.materializer`): runs one compiled plan as one commit;
- planning (:meth:`Substrate.plan_step`): a step's plan with what the lake knows (watermark,
  probed columns);
- commit lookup (:meth:`Substrate.resolve_outcome`): a step that did not report success, looked up
  in the lake;
- state store (:meth:`Substrate.materializations`): the recorded materializations of a table;
- change feed (:meth:`Substrate.feed`, and :meth:`Substrate.stale` over it): ``run --stale`` and
  the stale column of ``status``; the rules are shared (:func:`lakewrap.stale.find_stale`), the
  feed answers what the lake recorded and what changed since;
- maintainer (:meth:`Substrate.maintainer`): ``lakewrap maintain`` (compaction, snapshot expiry
  sparing run records, old and orphan files), or a refusal with a hint.

Importing this module (and the registry) loads neither duckdb nor pyarrow nor pyiceberg:
``lakewrap compile`` resolves its substrate's compiler through it. Each role's implementation is
imported when it is first asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lakewrap.config import SubstrateConfig

if TYPE_CHECKING:
    from lakewrap.compilers.base import Capabilities, Compiler
    from lakewrap.config import LakeConfig, ProjectConfig
    from lakewrap.execute.executor import Result
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.maintain import MaintainReport
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import Feed, StaleModel


class LakeHandle(Protocol):
    """An opened lake: where it is and how to reach it. No connection is open until :meth:`connect`."""

    root: Path

    @property
    def config(self) -> LakeConfig: ...

    @property
    def alias(self) -> str: ...

    def redact(self, text: str) -> str: ...

    def connect(self) -> Any: ...

    def close(self, con: Any) -> None: ...

    def check_exists(self) -> None: ...


class Materializer(Protocol):
    """Runs one compiled plan as one commit and reports it; never raises for model or data errors."""

    def materialize(self, con: Any, compiled: Any, *, drop_first: bool = False) -> Result: ...


class Maintainer(Protocol):
    """``lakewrap maintain`` on one lake: the four steps of :mod:`lakewrap.maintain`, into ``report``."""

    def maintain(self, specs: Sequence[ModelSpec], report: MaintainReport, *, dry_run: bool,
                 now: datetime) -> MaintainReport: ...


class Substrate:
    """One kind of lake. Subclasses set :attr:`name` and implement the roles."""

    name: ClassVar[str]
    # The record ``[lake]`` is validated into when it names this substrate (``substrate = "<tag>"``):
    # a :class:`~lakewrap.config.SubstrateConfig` subclass with ``substrate: Literal["<tag>"]`` and
    # the substrate's own keys. The base takes no key but ``substrate`` (its tag is then ``name``).
    config_class: ClassVar[type[SubstrateConfig]] = SubstrateConfig

    # -- compile side (pure: no database import) --------------------------------------------------
    def compiler(self) -> Compiler:
        raise NotImplementedError

    @property
    def capabilities(self) -> Capabilities:
        return self.compiler().caps

    # -- execute side ----------------------------------------------------------------------------
    def open(self, root: Path, *, config: ProjectConfig | None = None, read_only: bool = False) -> LakeHandle:
        raise NotImplementedError

    def materializer(self, lake: Any, run_id: str, folder: Path, *, policy: RetryPolicy | None = None,
                     strict: bool = False) -> Materializer:
        raise NotImplementedError

    def plan_step(self, lake: Any, con: Any, spec: ModelSpec, partition: str | None, now: datetime) -> Plan:
        raise NotImplementedError

    def resolve_outcome(self, lake: Any, con: Any, run_id: str, result: Result) -> Result:
        raise NotImplementedError

    # -- records ---------------------------------------------------------------------------------
    def materializations(self, lake: Any, target: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    # -- change feed -----------------------------------------------------------------------------
    def feed(self, lake: Any, con: Any) -> Feed:
        """The change feed of the opened ``lake`` read through ``con`` (a connection of it): the latest
        materialization of each partition, and which of them a change of an upstream table after
        its pin touched (:class:`lakewrap.stale.Feed`)."""
        raise NotImplementedError

    def stale(self, root: Path, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        """The stale partitions of each selected model of the lake at ``root`` (in ``selected``'s DAG
        order): :func:`lakewrap.stale.find_stale` over :meth:`feed`, on a read-only connection."""
        from lakewrap.stale import find_stale

        lake = self.open(root, read_only=True)
        con = lake.connect()
        try:
            return find_stale(self.feed(lake, con), project, selected)
        finally:
            lake.close(con)

    # -- maintainer ------------------------------------------------------------------------------
    def maintainer(self, root: Path, config: ProjectConfig) -> Maintainer:
        """The maintainer of the lake of the project at ``root`` (``config`` is its ``lakewrap.toml``):
        compacts the selected models' tables (the ``specs`` of :meth:`Maintainer.maintain`), expires
        the snapshots ``[maintain]`` lets go except those a retained run record references, deletes
        the files only expired snapshots referenced and the orphans. Opens nothing until it runs.
        A substrate that cannot be maintained raises :class:`~lakewrap.errors.UnsupportedError`
        with a hint (the default), before ``lakewrap maintain`` reads the project."""
        from lakewrap.errors import UnsupportedError

        raise UnsupportedError(f"lakewrap maintain does not run on substrate `{self.name}`",
                               hint=f"the `{self.name}` substrate implements no maintainer "
                               "(Substrate.maintainer); maintain its tables with its own engine's tools")

    def __repr__(self) -> str:
        return f"<substrate {self.name}>"
