"""The compiled plan: the statements one materialization executes, in order, with their parameters.

:class:`CompiledPlan` is the versioned, documented JSON contract of ``lakewrap compile --format json``
(``schema_version`` changes only with a breaking change; fields are only ever added).
"""

from __future__ import annotations

import hashlib
from dataclasses import field
from typing import Literal

from lakewrap.frozen import Frozen
from lakewrap.plan import Binding, Param

# The temporary table a plan stages the SELECT's rows in (the executor counts them there).
STAGE = "__lakewrap_stage"

SCHEMA_VERSION = 1

Role = Literal["setup", "stage", "guard", "bootstrap", "write", "test", "cleanup", "literal"]
Effect = Literal["insert", "delete", "update", "merge", "stage"]


class ScriptInfo(Frozen):
    """The Python function a script test hands the statement's relation to (``docs/tests.md``)."""

    path: str | None  # the project's ``.py`` file; None: the function a plugin registered for the kind
    function: str
    params: dict[str, str] = field(default_factory=dict)  # the ``key=value`` arguments, as text
    sha256: str | None = None  # of the file's text (part of ``sql_sha256``)


class TestInfo(Frozen):
    """What a ``test`` statement checks: the ``-- test`` line it comes from and its severity."""

    __test__ = False  # not a pytest class

    name: str
    kind: str
    severity: Literal["error", "warn"]
    line: int
    # a script test: the statement is the relation handed to this function, which finds the failing rows
    script: ScriptInfo | None = None


class CompiledStatement(Frozen):
    """One statement: its role in the plan, its SQL, and exactly the parameters it uses."""

    role: Role
    sql: str
    params: dict[str, Param] = field(default_factory=dict)
    note: str | None = None
    effect: Effect | None = None  # what a write's row count means ("stage": the SELECT's rows, staged)
    test: TestInfo | None = None  # for ``test`` statements


class SchemaCheck(Frozen):
    """How ``lakewrap run`` compares the result's columns with the live table before writing.

    The comparison depends on the table as it is when the transaction runs, so the executor reads
    both column lists inside the transaction (``lakewrap.compilers.schema``) and runs the
    statements ``on_schema_change`` calls for before the first write.
    """

    mode: Literal["fail", "append_new_columns", "sync_all_columns", "ignore"]
    relation: str | None  # the staged result (a temporary table); None: read from the plan's bootstrap
    managed: tuple[str, ...] = ()  # columns lakewrap adds (SCD2), never compared
    named: tuple[str, ...] = ()  # columns the write statements name (MERGE, SCD2): cannot be left out


class CommitOp(Frozen):
    """One pyiceberg commit operation (Iceberg, write path ``pyiceberg``), applied in the plan's one
    ``table.transaction()`` after its SQL statements ran in DuckDB.

    ``overwrite``: delete the target's rows matching ``delete_where`` (a SQL condition over the
    target's columns; ``TRUE`` is every row, a ``(k) IN (SELECT ...)`` reads the keys from a staged
    table), then append the rows of ``rows``. ``append``: only append. Both run with
    ``serializable`` isolation and carry lakewrap's state in the snapshot summary.
    """

    operation: Literal["overwrite", "append"]
    table: str
    rows: str
    delete_where: str | None = None
    params: dict[str, Param] = field(default_factory=dict)
    note: str | None = None
    partition: tuple[str, str] | None = None  # (Iceberg transform, column) of a table this commit creates
    # A merge into an unpartitioned table: when ``rewrite_keys`` counts more matched keys than
    # ``rewrite_above``, the commit replaces every row with the rows of ``rewrite`` (the whole table
    # after the merge) instead of binding a key filter of that many values (pyiceberg binds an IN
    # filter several times at ~20 us a value: 1.5 s of a 2.2 s merge of 10,000 keys).
    rewrite: str | None = None
    rewrite_keys: str | None = None
    rewrite_above: int | None = None
    # A merge with ``matched=replace``: the same commit, its row counts as DuckLake's delete and
    # insert (rows deleted: the matched rows; rows inserted: every appended row), not as updates.
    replaces_matched: bool = False

    def line(self) -> str:
        """The readable one-liner ``lakewrap compile`` prints."""
        where = f" where {' '.join(self.delete_where.split())}" if self.delete_where is not None else ""
        verb = "delete" + where + ", then append" if self.operation == "overwrite" else "append"
        text = f"pyiceberg {self.operation} {self.table}: {verb} the rows of {' '.join(self.rows.split())}"
        if self.rewrite is not None:
            text += (f"; when more than {self.rewrite_above} keys match: delete every row, then append the rows of "
                     f"{' '.join(self.rewrite.split())}")
        if self.replaces_matched:
            text += "; matched=replace: the matched rows count as deleted, the appended rows as inserted"
        return text


class PartitionWindow(Frozen):
    """One partition of a batch: its value and its own window (with its lookback)."""

    value: str
    start: str
    end: str


class Window(Frozen):
    """The window a partitioned materialization covers (ISO 8601 with offsets)."""

    kind: Literal["time", "dynamic"]
    value: str
    start: str
    end: str
    closed: Literal["[start, end)", "(start, end]"]
    lookback: int = 0
    # a batch of a range backfill (docs/strategies.md, "Range backfills"): the partitions the window
    # covers, each with its own window; one state row is recorded for each. Empty: one partition.
    partitions: tuple[PartitionWindow, ...] = ()


def window_of(binding: Binding | None) -> Window | None:
    """The :class:`Window` of a plan's binding (None: unpartitioned)."""
    if binding is None:
        return None
    return Window(kind=binding.kind, value=binding.value, start=binding.start.isoformat(),
                  end=binding.end.isoformat(), closed="[start, end)" if binding.kind == "time" else "(start, end]",
                  lookback=binding.lookback,
                  partitions=tuple(PartitionWindow(value=b.value, start=b.start.isoformat(), end=b.end.isoformat())
                                   for b in binding.partitions))


class Separability(Frozen):
    """Whether a range backfill may write several partitions of a time-partitioned model with one
    statement pair (``compilers/separable.py``), and how many per batch (``batch=N``)."""

    proven: bool
    reason: str  # what the proof found, or what kept it from holding
    batch: int


class CompiledPlan(Frozen):
    """Everything ``lakewrap compile`` prints for one model and partition."""

    schema_version: int = SCHEMA_VERSION
    model: str
    path: str
    target: str
    strategy: str
    substrate: str
    write_path: str
    window: Window | None
    idempotent: bool | None
    idempotent_note: str
    statements: tuple[CompiledStatement, ...]
    sql_sha256: str
    schema_check: SchemaCheck | None = None
    # Iceberg (write path pyiceberg): the commit operations applied after the statements, in one
    # table.transaction(). Empty for every SQL write path.
    commits: tuple[CommitOp, ...] = ()
    # time-partitioned plans: whether range backfills batch its partitions (None: not time-partitioned)
    separable: Separability | None = None

    @staticmethod
    def digest(statements: tuple[CompiledStatement, ...], commits: tuple[CommitOp, ...] = ()) -> str:
        """sha256 over the statements' SQL (a script test's: with its function, arguments and file's
        sha256) and the commit operations (not parameter values, which vary per partition)."""
        h = hashlib.sha256()
        for st in statements:
            h.update(st.sql.encode())
            h.update(b"\x00")
            if st.test is not None and st.test.script is not None:  # its file, function and arguments
                h.update(st.test.script.dump_json().encode())
                h.update(b"\x00")
        for op in commits:
            h.update(op.line().encode())
            h.update(b"\x00")
        return h.hexdigest()


class PlannedCommit(Frozen):
    """One commit a run of the compiled plans would make (``lakewrap.commitplan``): the plans it
    writes, as positions in ``CompileOutput.plans``; ``alone``, why it holds one plan only when group
    commit is on (a Python model, hooks, a range batch) or off (the substrate, the config)."""

    plans: tuple[int, ...]
    alone: str | None = None


class CompileOutput(Frozen):
    """The top-level JSON document of ``lakewrap compile --format json``."""

    schema_version: int = SCHEMA_VERSION
    lakewrap_version: str
    plans: tuple[CompiledPlan, ...]
    # the commits a run of the plans makes, in order (compile only: ``compile --as-of`` has none)
    commits: tuple[PlannedCommit, ...] = ()
