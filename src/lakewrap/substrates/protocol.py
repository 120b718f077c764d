"""The substrate protocol: what every lake lakewrap writes to provides, one role each.

A substrate is one object (:class:`Substrate`); :mod:`lakewrap.substrates.registry` resolves
``lakewrap.toml``'s ``[lake]`` to it in exactly one place. The commands (compile, run, backfill,
resume, seed, status, history, query, explain, reproduce, restore, maintain, test, ``run --stale``)
ask it for a role and never branch on the substrate's name:

- compiler (:meth:`Substrate.compiler`): the pure compiler; its ``Capabilities`` say what the
  substrate can do;
- lake handle (:meth:`Substrate.open`): a :class:`LakeHandle` (connect, close, redact, existence);
- materializer (:meth:`Substrate.materializer`): runs one compiled plan as one commit;
- planning (:meth:`Substrate.plan_step`): a step's plan with what the lake knows (watermark,
  probed columns);
- commit lookup (:meth:`Substrate.resolve_outcome`): a step that did not report success, looked up
  in the lake;
- run records (:meth:`Substrate.step_records`): what ``resume``, ``--missing-only`` and ``append``
  re-runs skip by (:mod:`lakewrap.skips`);
- seeding (:meth:`Substrate.seeder`): ``lakewrap seed``'s plans and commits;
- run-log store (:meth:`Substrate.runlog`): where the run log's four tables live (:mod:`lakewrap.runlog`);
- state store (:meth:`Substrate.materializations`): the recorded materializations of a table;
- change feed (:meth:`Substrate.stale`): ``run --stale`` and the stale column of ``status``.

Importing this module (and the registry) loads neither duckdb nor pyarrow nor pyiceberg:
``lakewrap compile`` resolves its substrate's compiler through it. Each role's implementation is
imported when it is first asked for.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan
    from lakewrap.compilers.base import Capabilities, Compiler
    from lakewrap.config import LakeConfig, ProjectConfig
    from lakewrap.execute.executor import Result
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.runlog import Store
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import StaleModel


class LakeHandle(Protocol):
    """An opened lake: where it is and how to reach it. No connection is open until :meth:`connect`."""

    root: Path
    config: LakeConfig
    # held around the coordinator's own statements on a connection the run's steps may share
    statement_lock: Any
    # whether several steps may write one table at once (optimistic commits, retried on conflict)
    parallel_writers: bool

    @property
    def alias(self) -> str: ...

    @property
    def is_shared(self) -> bool:
        """Whether :meth:`connect` hands out cursors of one instance the run's threads share."""

    def shared(self) -> AbstractContextManager[Any]:
        """A block inside which the run's threads may share what :meth:`connect` opens."""

    def redact(self, text: str) -> str: ...

    def connect(self) -> Any: ...

    def close(self, con: Any) -> None: ...

    def check_exists(self) -> None: ...


class Materializer(Protocol):
    """Runs one compiled plan as one commit and reports it; never raises for model or data errors."""

    def materialize(self, con: Any, compiled: Any, *, drop_first: bool = False) -> Result: ...


class StepRecords(Protocol):
    """What a run skips by, read from the lake's state of record (:func:`lakewrap.skips.mark`)."""

    def latest(self, target: str) -> dict[str | None, tuple[str, str]]:
        """partition (None: the whole table) → (``sql_sha256``, run id) of its latest materialization."""

    def appended(self, target: str) -> dict[str, set[str]]:
        """The partitions an append table holds since its last full refresh, each with the runs that
        appended it (:func:`lakewrap.skips.appended`)."""

    def stale(self, project: Project, chosen: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        """The partitions of ``chosen`` whose inputs changed since they were built (:mod:`lakewrap.stale`)."""


class Seeder(Protocol):
    """``lakewrap seed``: one commit per CSV file, replacing the table."""

    def connect(self) -> Any: ...

    def plan(self, path: Path, rel: str, schema: str, name: str) -> CompiledPlan: ...

    def materialize(self, con: Any, compiled: CompiledPlan) -> Result: ...


class Substrate:
    """One kind of lake. Subclasses set :attr:`name` and implement the roles."""

    name: ClassVar[str]

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

    def run_step(self, materializer: Any, con: Any, spec: ModelSpec, compiled: CompiledPlan, *,
                 drop_first: bool = False) -> Result:
        """One step of a run: ``compiled`` (the plan of ``spec``) through the :meth:`materializer`."""
        return materializer.materialize(con, compiled, drop_first=drop_first)  # type: ignore[no-any-return]

    def run_input(self, materializer: Any, con: Any, compiled: CompiledPlan, name: str, data: Any) -> Result:
        """``lakewrap.materialize()``: ``compiled`` reads ``data`` (Arrow, pandas) registered as ``name``."""
        raise NotImplementedError

    def resolve_outcome(self, lake: Any, con: Any, run_id: str, result: Result) -> Result:
        raise NotImplementedError

    def step_records(self, lake: Any, con: Any) -> StepRecords:
        raise NotImplementedError

    def seeder(self, lake: Any, run_id: str, folder: Path) -> Seeder:
        raise NotImplementedError

    def runlog(self, lake: Any, con: Any) -> Store:
        """The run log's store; ``con`` is the coordinator's connection (a store may write through it)."""
        raise NotImplementedError

    # -- records ---------------------------------------------------------------------------------
    def materializations(self, lake: Any, target: str) -> list[dict[str, Any]]:
        raise NotImplementedError

    def stale(self, root: Path, project: Project, selected: Sequence[ModelSpec]) -> dict[str, StaleModel]:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<substrate {self.name}>"
