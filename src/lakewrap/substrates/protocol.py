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
- state store (:meth:`Substrate.materializations`): the recorded materializations of a table, as
  typed records (:class:`lakewrap.provenance.Materialization`), for ``status`` and ``history``;
- change feed (:meth:`Substrate.feed`, and :meth:`Substrate.stale` over it): ``run --stale`` and
  the stale column of ``status``; the rules are shared (:func:`lakewrap.stale.find_stale`), the
  feed answers what the lake recorded and what changed since;
- freshness (:meth:`Substrate.changed_at`): when a table's rows last changed (``lakewrap freshness``);
- maintainer (:meth:`Substrate.maintainer`): ``lakewrap maintain`` (compaction, snapshot expiry
  sparing run records, old and orphan files), or a refusal with a hint.
- reads (:meth:`Substrate.query`): one read-only statement for ``lakewrap query``, optionally as of
  a run or snapshot (:class:`lakewrap.provenance.RunOrSnapshot`);
- tests (:meth:`Substrate.test_session`): the session ``lakewrap test`` runs a model's tests in
  (and ``lakewrap show`` its SELECT);
- shell (:meth:`Substrate.shell_config`): the ``[lake]`` another DuckDB client attaches
  (``lakewrap shell``), refused where none can;
- provenance backend (:meth:`Substrate.provenance`): the records ``explain``, ``reproduce``,
  ``restore`` and ``compile --as-of`` read, the replay, the restore plan, the as-of pins
  (:class:`ProvenanceBackend`);
- transcript (:attr:`Substrate.transcript`): how the printed form of a plan reads on it
  (:mod:`lakewrap.output`, ``explain``);
- run records (:meth:`Substrate.step_records`): what ``resume``, ``--missing-only`` and ``append``
  re-runs skip by (:mod:`lakewrap.skips`);
- seeding (:meth:`Substrate.seeder`): ``lakewrap seed``'s plans and commits;
- run-log store (:meth:`Substrate.runlog`): where the run log's four tables live (:mod:`lakewrap.runlog`);
- job store (:meth:`Substrate.job_store`): where the job queue's table lives (:mod:`lakewrap.jobs`);
- state store (:meth:`Substrate.materializations`): the recorded materializations of a table;

Importing this module (and the registry) loads neither duckdb nor pyarrow nor pyiceberg:
``lakewrap compile`` resolves its substrate's compiler through it. Each role's implementation is
imported when it is first asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lakewrap.config import SubstrateConfig

if TYPE_CHECKING:
    from lakewrap.compilers.artifacts import CompiledPlan, Window
    from lakewrap.compilers.base import Capabilities, Compiler
    from lakewrap.config import LakeConfig, ProjectConfig
    from lakewrap.execute.executor import GroupStep, Result
    from lakewrap.execute.retry import RetryPolicy
    from lakewrap.jobstore import JobStore
    from lakewrap.maintain import MaintainReport
    from lakewrap.plan import Plan
    from lakewrap.project import Project
    from lakewrap.provenance import Materialization, Reproduction, RunOrSnapshot
    from lakewrap.runlog import Store
    from lakewrap.seedfiles import Seed
    from lakewrap.spec import ModelSpec
    from lakewrap.stale import Feed, StaleModel


class LakeHandle(Protocol):
    """An opened lake: where it is and how to reach it. No connection is open until :meth:`connect`."""

    root: Path

    @property
    def config(self) -> LakeConfig: ...
    # held around the coordinator's own statements on a connection the run's steps may share
    statement_lock: Any
    # whether several steps may write one table at once (optimistic commits, retried on conflict)
    parallel_writers: bool

    @property
    def one_connection(self) -> bool:
        """Whether the run must hold one connection at a time, opened where it is used (an idle
        connection would lock the catalog against other writers: DuckLake on SQLite)."""
        ...

    @property
    def many_processes(self) -> bool:
        """Whether other processes can open the lake (the process and Dask executors need it)."""
        ...

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


class Maintainer(Protocol):
    """``lakewrap maintain`` on one lake: the four steps of :mod:`lakewrap.maintain`, into ``report``."""

    def maintain(self, specs: Sequence[ModelSpec], report: MaintainReport, *, dry_run: bool,
                 now: datetime) -> MaintainReport: ...
@dataclass(frozen=True)
class Transcript:
    """How the printed form of a plan (:func:`lakewrap.output.plan_sql`) and of a recorded
    materialization (``lakewrap explain``) reads on a substrate."""

    # the leading setup statements run before BEGIN, each committed on its own (DuckDB's Iceberg
    # REST catalog cannot create a table in a namespace created in the same transaction)
    setup_before_begin: bool = False
    # the as-of header of ``compile --as-of``: how the upstream reads are pinned
    as_of: str = "every upstream read is pinned with AT (VERSION => n)"
    # whether the as-of header lists the pinned upstreams (the notes of the pinning setup statements)
    lists_pins: bool = False
    # whether a record has a base snapshot (the target's snapshot the transaction started from)
    shows_base: bool = False


class ProvenanceBackend(Protocol):
    """The records of one lake and what ``explain``, ``reproduce``, ``restore`` and ``compile
    --as-of`` do with them (:mod:`lakewrap.provenance` holds the shared logic: which
    materializations a command means, the printout, the comparison). Opening one reads nothing;
    :meth:`close` releases whatever it opened."""

    def by_run(self, run_id: str) -> list[Materialization]:
        """The materializations of run ``run_id``, with their statements (empty: none recorded)."""
        ...

    def by_snapshot(self, snapshot_id: int) -> list[Materialization]:
        """The materialization that committed snapshot ``snapshot_id``; a ``StateError`` saying
        why when the lake has no such snapshot or lakewrap did not commit it."""
        ...

    def explain_ddl(self, m: Materialization) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        """What changed the table's DDL outside the plan's statements, as statements to print: the
        ``--full-refresh`` (None without one) and the ``on_schema_change`` changes."""
        ...

    def reproduce(self, found: list[Materialization]) -> list[Reproduction]:
        """Each materialization rebuilt in scratch space and compared with the table it committed."""
        ...

    def pinned_at_snapshot(self, plans: list[CompiledPlan], ref: RunOrSnapshot) -> list[CompiledPlan]:
        """``compile --as-of N``: each plan with its upstream reads as the lake stood at snapshot N."""
        ...

    def pinned_to(self, plan: CompiledPlan, m: Materialization) -> CompiledPlan:
        """``compile --as-of RUN``: ``plan`` with the pins and parameter values ``m`` recorded."""
        ...

    def restore_version(self, target: str, window: Window | None, to_run: str | None,
                        to_snapshot: int | None) -> int:
        """The snapshot a restore of ``target`` copies from; a ``StateError`` when there is none."""
        ...

    def restore_plan(self, spec: ModelSpec, key: str | None, version: int, window: Window | None) -> CompiledPlan:
        """The restore as a plan this substrate's executor commits (what ``--dry-run`` prints)."""
        ...

    def run_restore(self, plan: CompiledPlan, version: int, provenance: dict[str, Any], run_id: str,
                    folder: Path) -> Result:
        """Commit the restore: one transaction with its own record naming what it restored."""
        ...

    def close(self) -> None: ...


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
    """``lakewrap seed``: one commit per CSV file, replacing the table (docs/seeds.md)."""

    def connect(self) -> Any: ...

    def plan(self, seed: Seed) -> CompiledPlan:
        """The seed's load: ``read_csv`` with the seed's format (:meth:`CsvFormat.read_options`)."""

    def loaded(self, con: Any, target: str) -> tuple[str, str] | None:
        """(``sql_sha256``, ``seed_sha256``) the lake recorded in the seed commit that left table
        ``target`` as it is now; None when another commit changed it since, or none recorded (a
        substrate that cannot tell returns None: every seed then loads)."""

    def materialize(self, con: Any, compiled: CompiledPlan, *, provenance: dict[str, Any] | None = None) -> Result:
        """Commit the load; ``provenance`` (``{"seed_sha256": ...}``) is recorded with the commit."""


class Substrate:
    """One kind of lake. Subclasses set :attr:`name` and implement the roles."""

    name: ClassVar[str]
    # The record ``[lake]`` is validated into when it names this substrate (``substrate = "<tag>"``):
    # a :class:`~lakewrap.config.SubstrateConfig` subclass with ``substrate: Literal["<tag>"]`` and
    # the substrate's own keys. The base takes no key but ``substrate`` (its tag is then ``name``).
    config_class: ClassVar[type[SubstrateConfig]] = SubstrateConfig
    transcript: ClassVar[Transcript] = Transcript()

    def defer_refusal(self, other: Substrate) -> str | None:
        """Why an environment on this substrate cannot ``defer`` to a lake of substrate ``other``
        (None: it can; docs/environments.md, "Defer"). Read when ``lakewrap.toml`` is."""
        return f"deferring is not implemented for substrate `{self.name}`"

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
                 drop_first: bool = False, inputs: dict[str, Any] | None = None,
                 provenance: dict[str, Any] | None = None) -> Result:
        """One step of a run: ``compiled`` (the plan of ``spec``) through the :meth:`materializer`;
        ``inputs``, ``provenance``: a Python model's result and what its function read at."""
        return materializer.materialize(con, compiled, drop_first=drop_first,  # type: ignore[no-any-return]
                                        inputs=inputs, provenance=provenance)

    @contextmanager
    def python_reads(self, lake: Any, con: Any, spec: ModelSpec) -> Iterator[tuple[Any, Callable[[str, str], Any],
                                                                                 dict[str, Any]]]:
        """A Python model's reads (docs/python-models.md): a DuckDB connection for ``ctx.con``, a
        function ``(schema, name) -> relation`` for ``ctx.ref``, pinned as the commit records its
        reads, and what to record beside the commit's pins."""
        from lakewrap.errors import UnsupportedError

        raise UnsupportedError(f"{spec.path}: the `{self.name}` substrate does not run Python models",
                               hint="run Python models on ducklake or iceberg (docs/python-models.md)")
        yield  # pragma: no cover - a generator

    # Whether :meth:`run_group` commits several steps in one transaction (docs/running.md, "Group
    # commit and --atomic"); False: every step is its own commit and ``--atomic`` is refused.
    group_commit: ClassVar[bool] = False
    # Whether a group may hold a step that reads another member's table (the next levels of the DAG,
    # ``--atomic``): its pins then name a commit not yet made, which the substrate must record.
    group_chains: ClassVar[bool] = True

    def run_group(self, materializer: Any, con: Any, steps: list[GroupStep], *, group_id: str,
                  atomic: bool = False, seconds: float = 30.0, cancelled: Any = None) -> list[Result]:
        """Several steps in one lake transaction: a result per step, in order; a reader sees all the
        committed ones or none (``atomic``: all of them or none). Only when :attr:`group_commit`."""
        raise NotImplementedError

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

    def job_store(self, root: Path, config: ProjectConfig) -> JobStore:
        """Where the job queue's table lives (:mod:`lakewrap.jobs`, docs/queue.md); opened without
        opening the lake, so a process that does not own the catalog can enqueue. By default a
        SQLite file ``.lakewrap/jobs.sqlite`` drained by one worker at a time."""
        from lakewrap.config import DEFAULT_DIR
        from lakewrap.jobstore import SQLiteJobs

        return SQLiteJobs(root / DEFAULT_DIR / "jobs.sqlite", exclusive=True,
                          where=f"the job file {DEFAULT_DIR}/jobs.sqlite of a `{self.name}` lake")

    # -- records ---------------------------------------------------------------------------------
    def materializations(self, lake: Any, target: str) -> list[Materialization]:
        """State store: the materializations of ``target`` recorded in the lake, oldest first
        (without their statements; empty when nothing ran yet)."""
        raise NotImplementedError

    @contextmanager
    def state_reader(self, lake: Any) -> Iterator[Callable[[str], list[Materialization]]]:
        """:meth:`materializations` of one target after another on one session (``status``)."""
        yield lambda target: self.materializations(lake, target)

    def query(self, root: Path, text: str, as_of: RunOrSnapshot | None, fetch: Callable[[Any], Any]) -> Any:
        """Reads: ``fetch(cursor)`` of one read-only statement (checked by the caller against this
        lake's sandbox, :meth:`file_sandbox`), optionally with every table as of a run or snapshot."""
        raise NotImplementedError

    def check_as_of(self, as_of: RunOrSnapshot | None) -> None:
        """Refuse ``query --as-of`` where the lake cannot read every table as of a run or snapshot."""

    def file_sandbox(self, root: Path) -> bool:
        """Whether the lake's connections have a file sandbox (``lakewrap query`` may read files)."""
        return True

    def test_session(self, lake: Any, con: Any, spec: ModelSpec) -> AbstractContextManager[Any]:
        """The cursor ``lakewrap test`` runs one model's tests on (``con`` from ``lake.connect()``)."""
        raise NotImplementedError

    def shell_config(self, root: Path) -> LakeConfig:
        """``lakewrap shell``: the ``[lake]`` another DuckDB client attaches; refused where none can."""
        from lakewrap.errors import ConfigError, Location

        raise ConfigError(f"`lakewrap shell` cannot open a lake of substrate `{self.name}`",
                          location=Location("lakewrap.toml"), hint="read its tables with `lakewrap query`")

    def provenance(self, root: Path) -> ProvenanceBackend:
        """Provenance backend: the records of the lake at ``root`` (:class:`ProvenanceBackend`)."""
        from lakewrap.errors import UnsupportedError

        raise UnsupportedError(f"substrate `{self.name}` records no provenance lakewrap can read",
                               hint="explain, reproduce, restore and compile --as-of read the records "
                               "lakewrap's own commits carry")


    # -- change feed -----------------------------------------------------------------------------
    def feed(self, lake: Any, con: Any) -> Feed:
        """The change feed of the opened ``lake`` read through ``con`` (a connection of it): the latest
        materialization of each partition, and which of them a change of an upstream table after
        its pin touched (:class:`lakewrap.stale.Feed`). A substrate without one refuses
        (``run --stale``, ``--missing-only``); ``lakewrap status`` then shows no stale column."""
        from lakewrap.errors import UnsupportedError

        raise UnsupportedError(f"substrate `{self.name}` has no change feed",
                               hint="run --stale and --missing-only read the lake's changes through "
                               "Substrate.feed, which this substrate does not implement")

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

    def changed_at(self, root: Path, table: str) -> datetime | None:
        """When the last commit that changed the rows of ``table`` (``schema.name``) of the lake at
        ``root`` was made (aware, UTC); None: the table does not exist or never held rows.
        ``lakewrap freshness`` reads it for a ``[sources]`` table without ``loaded_at``."""
        from lakewrap.errors import UnsupportedError

        raise UnsupportedError(f"substrate `{self.name}` cannot tell when `{table}` last changed",
                               hint=f'set loaded_at = "<column>" in [sources."{table}"] of lakewrap.toml')

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
