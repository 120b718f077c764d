"""Collects what a model's header lines say, then resolves the strategy with located errors.

Keyword handlers (see :mod:`lakewrap.annotations.keywords`) fill a :class:`Header`; after the last
line, :meth:`Header.resolve` turns the collected facts into the pieces of a
:class:`~lakewrap.spec.ModelSpec`, rejecting combinations that make no sense and pointing at the
line that caused the conflict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lakewrap.annotations.lexer import Annotation, Arg
from lakewrap.errors import AnnotationError, Location
from lakewrap.spec import (
    AppendStrategy,
    ColumnSpec,
    DeleteInsertStrategy,
    Freshness,
    HookSpec,
    LiteralStrategy,
    MergeStrategy,
    Partitioning,
    ScheduleSpec,
    SnapshotStrategy,
    TableRef,
    TableStrategy,
    TestSpec,
    TriggerSpec,
    ViewStrategy,
)


@dataclass(frozen=True)
class ColumnRef:
    """A column named in an annotation, to be checked against the SELECT's output columns."""

    name: str
    ann: Annotation
    arg: Arg
    role: str


@dataclass
class Header:
    """Mutable collector filled by keyword handlers, one per model file."""

    path: str
    seen: dict[str, Annotation] = field(default_factory=dict)
    materialized: str | None = None
    target: TableRef | None = None
    partition: Partitioning | None = None
    merge: dict[str, Any] | None = None
    append: bool = False
    snapshot: dict[str, Any] | None = None
    declared_upstreams: list[TableRef] = field(default_factory=list)
    tests: list[TestSpec] = field(default_factory=list)
    columns: list[ColumnSpec] = field(default_factory=list)
    on_schema_change: str | None = None
    tags: list[str] = field(default_factory=list)
    retry: int | None = None
    freshness: Freshness | None = None
    schedule: ScheduleSpec | None = None
    trigger: TriggerSpec | None = None
    description: str | None = None
    extensions: dict[str, Any] = field(default_factory=dict)
    column_refs: list[ColumnRef] = field(default_factory=list)
    hooks: list[HookSpec] = field(default_factory=list)
    root: Path | None = None  # the project folder, for keywords that name its files

    def ref(self, name: str, ann: Annotation, arg: Arg, role: str) -> None:
        """Remember that ``name`` must be an output column of the SELECT."""
        self.column_refs.append(ColumnRef(name, ann, arg, role))

    def _conflict(self, keyword: str, message: str, hint: str | None = None) -> AnnotationError:
        ann = self.seen[keyword]
        return ann.error(message, hint=hint)

    def _forbid(self, keywords: tuple[str, ...], why: str, hint: str | None = None) -> None:
        for kw in keywords:
            if kw in self.seen:
                raise self._conflict(kw, why, hint)

    def _check_snapshot_watermark(self, strategy: SnapshotStrategy) -> None:
        """A snapshot may read only the rows past a watermark: timestamp strategy, deletions ignored.

        The other forms compare every source row with the current versions (a check snapshot has no
        timestamp to window on; finding deleted keys needs the whole source).
        """
        if self.partition is None:
            return
        if self.partition.kind != "dynamic":
            raise self._conflict(
                "partitioned",
                "does not apply to snapshot models: a snapshot writes versions, not partitions",
                "to read only new source rows, use `-- partitioned dynamic key=<updated_at column>`",
            )
        if strategy.strategy != "timestamp":
            raise self._conflict(
                "partitioned",
                "a check snapshot compares every source row; it takes no watermark",
                "remove the `-- partitioned` line, or use strategy=timestamp with updated_at=<col>",
            )
        if strategy.hard_deletes != "ignore":
            raise self._conflict(
                "partitioned",
                f"hard_deletes={strategy.hard_deletes} needs the whole source to see which keys left; "
                "it takes no watermark",
                "remove the `-- partitioned` line, or use hard_deletes=ignore",
            )

    def resolve(self, body_location: Location) -> dict[str, Any]:
        """Decide the strategy and return the ModelSpec fields the header determines."""
        mat = self.materialized
        if mat is None and self.snapshot is not None:
            mat = "snapshot"
        strategy: Any
        if mat is None:
            self._forbid(
                ("unique_key", "append", "on_schema_change", "column"),
                "only applies to wrapped models",
                "add `-- materialized incremental|table|...` to let lakewrap write the DDL/DML, "
                "or remove this line from the literal model",
            )
            strategy = LiteralStrategy()
        elif mat in ("table", "view"):
            self._forbid(
                ("partitioned", "unique_key", "append", "snapshot"),
                f"does not apply to `materialized {mat}`, which rebuilds the whole "
                + ("view" if mat == "view" else "table"),
                "use `-- materialized incremental` for partitioned, merged or appended writes",
            )
            self._forbid(
                ("on_schema_change",),
                f"does not apply to `materialized {mat}`: a rebuild always takes the new schema",
                "remove the line; `-- on_schema_change` is for `-- materialized incremental` models",
            )
            strategy = TableStrategy() if mat == "table" else ViewStrategy()
        elif mat == "incremental":
            self._forbid(
                ("snapshot",),
                "SCD2 history needs `-- materialized snapshot`",
                "change `-- materialized incremental` to `-- materialized snapshot`",
            )
            if self.append and self.merge is not None:
                raise self._conflict(
                    "append",
                    "cannot be combined with `-- unique_key` (append inserts, merge upserts)",
                    "keep `-- unique_key` to merge on the key, or `-- append` to insert only",
                )
            if self.merge is not None:
                strategy = MergeStrategy(**self.merge)
            elif self.append:
                strategy = AppendStrategy()
            elif self.partition is not None:
                strategy = DeleteInsertStrategy()
            else:
                ann = self.seen["materialized"]
                raise ann.error(
                    "an incremental model needs to say how it writes",
                    hint="add `-- partitioned daily key=<col>` (replace a partition), "
                    "`-- unique_key <col>` (merge) or `-- append` (insert only)",
                )
        elif mat == "snapshot":
            if self.snapshot is None:
                ann = self.seen["materialized"]
                raise ann.error(
                    "a snapshot model needs a `-- snapshot` line",
                    hint="add `-- snapshot strategy=timestamp unique_key=<col> updated_at=<col>`",
                )
            self._forbid(
                ("unique_key", "append"),
                "does not apply to snapshot models",
                "SCD2 history takes its key from `-- snapshot unique_key=<col>`",
            )
            strategy = SnapshotStrategy(**self.snapshot)
            self._check_snapshot_watermark(strategy)
        else:  # pragma: no cover - the handler validates the value
            raise AssertionError(mat)
        if self.partition is not None and mat is None and self.partition.kind == "dynamic":
            raise self._conflict(
                "partitioned",
                "dynamic (watermark) partitions need a wrapped model",
                "add `-- materialized incremental`",
            )
        return {
            "materialized": mat,
            "strategy": strategy,
            "partition": self.partition,
            "declared_upstreams": tuple(self.declared_upstreams),
            "tests": tuple(self.tests),
            "columns": tuple(self.columns),
            "on_schema_change": self.on_schema_change or "fail",
            "tags": tuple(self.tags),
            "retry": self.retry,
            "freshness": self.freshness,
            "schedule": self.schedule,
            "trigger": self.trigger,
            "description": self.description,
            "extensions": dict(self.extensions),
            "hooks": tuple(self.hooks),
        }
