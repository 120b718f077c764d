"""The typed, frozen description of one model: what the header and the SQL say, nothing run yet.

A :class:`ModelSpec` is produced by :mod:`lakewrap.parse` (validated by pydantic there) and consumed
by :mod:`lakewrap.plan`. Strategies form a discriminated union on ``kind``; cross-field rules live in
``__post_init__`` so that an impossible spec cannot be constructed, whoever builds it.
"""

from __future__ import annotations

from dataclasses import field
from typing import Annotated, Any, Literal

from lakewrap.frozen import Frozen, Meta
from lakewrap.partitions import Grain


class TableRef(Frozen):
    """A two-part table name, ``schema.name``, as written (case preserved)."""

    schema_name: str
    name: str

    def __str__(self) -> str:
        return f"{self.schema_name}.{self.name}"

    @property
    def key(self) -> str:
        """Case-folded name used for lookups (DuckDB identifiers are case-insensitive)."""
        return f"{self.schema_name.lower()}.{self.name.lower()}"


# --- strategies -----------------------------------------------------------------------------------


class TableStrategy(Frozen):
    """Full rebuild: ``CREATE OR REPLACE TABLE ... AS``."""

    kind: Literal["table"] = "table"


class ViewStrategy(Frozen):
    """A view over the SELECT."""

    kind: Literal["view"] = "view"


class DeleteInsertStrategy(Frozen):
    """Replace one partition window: delete what is in it, insert the SELECT's rows."""

    kind: Literal["delete+insert"] = "delete+insert"


class MergeStrategy(Frozen):
    """MERGE on a unique key; optional partition window limits the source."""

    kind: Literal["merge"] = "merge"
    unique_key: tuple[str, ...]
    dedupe: Literal["error", "latest_by"] = "error"
    dedupe_by: str | None = None
    update_columns: tuple[str, ...] | None = None
    exclude_columns: tuple[str, ...] = ()
    predicate: str | None = None
    # What happens to a target row whose key the result holds: ``update`` (MERGE: updated in place,
    # its row id and change-feed update kept) or ``replace`` (deleted, the result's row inserted).
    matched: Literal["update", "replace"] = "update"

    def __post_init__(self) -> None:
        if not self.unique_key:
            raise ValueError("unique_key needs at least one column")
        if self.matched == "replace" and (self.update_columns is not None or self.exclude_columns
                                          or self.predicate is not None):
            raise ValueError("matched=replace replaces whole rows: no update_columns, exclude_columns or predicate")
        if (self.dedupe == "latest_by") != (self.dedupe_by is not None):
            raise ValueError("dedupe=latest_by(<col>) names exactly one ordering column")
        if self.update_columns is not None and self.exclude_columns:
            raise ValueError("update_columns and exclude_columns cannot be combined")


class AppendStrategy(Frozen):
    """Insert only (not idempotent: a re-run inserts the rows again)."""

    kind: Literal["append"] = "append"


class SnapshotStrategy(Frozen):
    """SCD2 history: close changed current versions, insert new ones."""

    kind: Literal["snapshot"] = "snapshot"
    strategy: Literal["timestamp", "check"]
    unique_key: tuple[str, ...]
    updated_at: str | None = None
    check_cols: tuple[str, ...] | Literal["all"] | None = None
    hard_deletes: Literal["ignore", "invalidate", "new_record"] = "ignore"

    def __post_init__(self) -> None:
        if not self.unique_key:
            raise ValueError("unique_key needs at least one column")
        if self.strategy == "timestamp" and self.updated_at is None:
            raise ValueError("strategy=timestamp needs updated_at=<column>")
        if self.strategy == "check" and self.check_cols is None:
            raise ValueError("strategy=check needs check_cols=<col,...> (or check_cols=all)")


class LiteralStrategy(Frozen):
    """A literal model: its statements run as written, in one transaction."""

    kind: Literal["literal"] = "literal"


Strategy = Annotated[
    TableStrategy
    | ViewStrategy
    | DeleteInsertStrategy
    | MergeStrategy
    | AppendStrategy
    | SnapshotStrategy
    | LiteralStrategy,
    Meta(discriminator="kind"),
]

STRATEGY_KINDS = ("table", "view", "delete+insert", "merge", "append", "snapshot", "literal")


# --- partitioning ---------------------------------------------------------------------------------


class TimePartitioning(Frozen):
    """Calendar partitions of ``key`` in time zone ``tz``."""

    kind: Literal["time"] = "time"
    grain: Grain
    key: str
    tz: str = "UTC"
    start: str | None = None
    lookback: Annotated[int, Meta(ge=0)] = 0
    # partitions a range backfill of a separable model writes with one statement pair (docs/strategies.md)
    batch: Annotated[int, Meta(ge=1)] = 31


class DynamicPartitioning(Frozen):
    """Watermark window: ``(last recorded max(key), now]``."""

    kind: Literal["dynamic"] = "dynamic"
    key: str


Partitioning = Annotated[TimePartitioning | DynamicPartitioning, Meta(discriminator="kind")]


# --- tests and contracts --------------------------------------------------------------------------


class TestSpec(Frozen):
    """One ``-- test`` annotation. ``args`` hold the kind-specific, validated arguments."""

    __test__ = False  # not a pytest class

    kind: str
    severity: Literal["error", "warn"] = "error"
    args: dict[str, Any] = field(default_factory=dict)
    line: int


class HookSpec(Frozen):
    """A ``-- pre_run`` / ``-- post_run`` / ``-- on_failure`` line: the script and where it is named."""

    event: Literal["pre_run", "post_run", "on_failure"]
    path: str  # relative to the project folder
    timeout: float | None = None  # seconds; None: ``[hooks] timeout``
    line: int
    column: int


class ColumnSpec(Frozen):
    """A ``-- column`` contract: name, DuckDB type, nullability, description."""

    name: str
    type: str
    not_null: bool = False
    description: str | None = None
    line: int


class Freshness(Frozen):
    """A ``-- freshness`` line (or a ``[sources."schema.table"]`` policy): ages, in seconds, past which
    the table is ``warn`` or ``error`` (``lakewrap freshness``, docs/schedules.md)."""

    warn_after: Annotated[int | None, Meta(gt=0)] = None
    error_after: Annotated[int | None, Meta(gt=0)] = None

    def __post_init__(self) -> None:
        if self.warn_after is None and self.error_after is None:
            raise ValueError("a freshness policy needs warn_after, error_after or both")
        if self.warn_after is not None and self.error_after is not None and self.warn_after >= self.error_after:
            raise ValueError("warn_after must be shorter than error_after")


class ScheduleSpec(Frozen):
    """A ``-- schedule "<cron>" [tz=...]`` line: the model is enqueued at every due time of ``cron``
    in ``tz`` (``lakewrap scheduler``, docs/schedules.md)."""

    cron: str
    tz: str = "UTC"
    catch_up: Literal["all", "latest", "skip"] = "latest"
    line: int


class TriggerSpec(Frozen):
    """A ``-- trigger upstream [debounce=5m]`` line: the model is enqueued for the partitions whose
    upstream rows changed, commits within ``debounce`` seconds of the first coalesced into one job."""

    on: Literal["upstream"] = "upstream"
    debounce: Annotated[int, Meta(ge=0)] = 0
    line: int


OnSchemaChange = Literal["fail", "append_new_columns", "sync_all_columns", "ignore"]


class ModelSpec(Frozen):
    """Everything a model file declares, validated. Produced by :func:`lakewrap.parse.parse_model`."""

    path: str
    name: str
    target: TableRef
    materialized: Literal["table", "view", "incremental", "snapshot"] | None
    strategy: Strategy
    partition: Partitioning | None = None
    upstreams: tuple[TableRef, ...] = ()
    declared_upstreams: tuple[TableRef, ...] = ()
    tests: tuple[TestSpec, ...] = ()
    columns: tuple[ColumnSpec, ...] = ()
    on_schema_change: OnSchemaChange = "fail"
    tags: tuple[str, ...] = ()
    retry: Annotated[int | None, Meta(ge=0)] = None
    freshness: Freshness | None = None
    schedule: ScheduleSpec | None = None
    trigger: TriggerSpec | None = None
    description: str | None = None
    sql: str
    body_line: int
    output_columns: tuple[str, ...] | None = None
    # what the SELECT reads of each table, by column, as compact JSON (lakewrap.column_reads)
    column_reads: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)
    hooks: tuple[HookSpec, ...] = ()  # in file order (lakewrap.hooks)

    @property
    def wrapped(self) -> bool:
        """Whether lakewrap writes the DDL/DML around the SELECT."""
        return self.materialized is not None

    @property
    def all_upstreams(self) -> tuple[TableRef, ...]:
        """Upstreams read from the SQL plus those declared with ``-- on``, without repeats."""
        seen: dict[str, TableRef] = {}
        for ref in (*self.upstreams, *self.declared_upstreams):
            seen.setdefault(ref.key, ref)
        return tuple(seen.values())

    @property
    def columns_known(self) -> tuple[str, ...] | None:
        """Output columns from the SELECT list, else from ``-- column`` contracts, else None."""
        if self.output_columns is not None:
            return self.output_columns
        if self.columns:
            return tuple(c.name for c in self.columns)
        return None
