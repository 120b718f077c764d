"""ModelSpec + partition → :class:`Plan`: which window, which parameters, which columns. No SQL.

The planner decides *what* one materialization covers; the compilers decide *how* to write it.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import field
from datetime import datetime, timezone
from typing import Literal

from lakewrap.errors import PlanError
from lakewrap.frozen import Frozen
from lakewrap.partitions import Grain, Partition, latest_complete, parse_partition
from lakewrap.spec import DynamicPartitioning, ModelSpec, TimePartitioning

# The registered name of the substrate a plan is for (lakewrap.substrates.registry: "ducklake",
# "iceberg", "iceberg-sql", or one a package adds); its compiler is compiler_for(name).
Substrate = str
# The lower bound of a dynamic window on its first run: no watermark recorded yet.
BEGINNING_OF_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)


class Param(Frozen):
    """A bound parameter: its DuckDB type and its value as text (ISO 8601 for timestamps)."""

    type: Literal["TIMESTAMPTZ", "VARCHAR"]
    value: str

    def python(self) -> object:
        """The value to hand to the database driver."""
        if self.type == "TIMESTAMPTZ":
            return datetime.fromisoformat(self.value)
        return self.value


class Binding(Frozen):
    """The partition a materialization writes: its value and the window it replaces.

    For time partitions the window is half-open, ``[start, end)``, widened backwards by
    ``lookback``; for dynamic (watermark) partitions it is ``(start, end]``.
    """

    kind: Literal["time", "dynamic"]
    value: str
    start: datetime
    end: datetime
    lookback: int = 0
    # a range binding (a batch of a range backfill, lakewrap.batches): every partition it covers, in
    # order, each with its own window; empty for one partition. ``value`` is then the first one.
    partitions: tuple[Binding, ...] = ()

    def params(self) -> dict[str, Param]:
        return {
            "partition_start": Param(type="TIMESTAMPTZ", value=self.start.isoformat()),
            "partition_end": Param(type="TIMESTAMPTZ", value=self.end.isoformat()),
            "partition_value": Param(type="VARCHAR", value=self.value),
        }


class Plan(Frozen):
    """One materialization to compile: the model, the substrate, the partition, the columns."""

    model: ModelSpec
    substrate: Substrate = "ducklake"
    binding: Binding | None = None
    run_timestamp: datetime | None = None
    columns: tuple[str, ...] | None = None
    # ``-- test sql <file>``: each file's text by its project-relative path (read by the caller)
    test_sql: dict[str, str] = field(default_factory=dict)

    def params(self) -> dict[str, Param]:
        """Every parameter this plan can bind (statements take the subset they use)."""
        out = self.binding.params() if self.binding else {}
        if self.run_timestamp is not None:
            out["run_timestamp"] = Param(type="TIMESTAMPTZ", value=self.run_timestamp.isoformat())
        return out


@functools.lru_cache(maxsize=256)
def bind_time(part: TimePartitioning, value: str | None, now: datetime | None = None) -> Binding:
    """The binding of a time-partitioned model for ``value`` (default: latest complete partition)."""
    grain = Grain(part.grain)
    if value is None:
        p = latest_complete(grain, now or datetime.now(timezone.utc), part.tz)
    else:
        p = parse_partition(grain, value, part.tz)
        if part.start is not None and p < parse_partition(grain, part.start, part.tz):
            raise PlanError(
                f"partition {p.value} is before the model's first partition, start={part.start}",
                hint="pick a partition from start= on, or change start= in the model's `-- partitioned` line",
            )
    first: Partition = p
    for _ in range(part.lookback):
        first = first.previous()
    return Binding(kind="time", value=p.value, start=first.window.start, end=p.window.end, lookback=part.lookback)


def bind_range(part: TimePartitioning, values: tuple[str, ...]) -> Binding:
    """One window covering the consecutive partitions ``values`` (first to last, each with its
    lookback): from the first one's start to the last one's end, each partition's own binding kept."""
    each = tuple(bind_time(part, v) for v in values)
    if len(each) < 2:
        raise PlanError("a range binding needs at least two partitions")
    for a, b in itertools.pairwise(each):
        if parse_partition(Grain(part.grain), a.value, part.tz).next().value != b.value:
            raise PlanError(f"partitions {a.value} and {b.value} are not consecutive; a batch covers a range")
    return Binding(kind="time", value=each[0].value, start=each[0].start, end=each[-1].end,
                   lookback=part.lookback, partitions=each)


def widen(plan: Plan, values: tuple[str, ...]) -> Plan:
    """``plan`` (of ``values[0]``) bound to the window of the whole batch ``values``."""
    part = plan.model.partition
    if not isinstance(part, TimePartitioning):
        raise PlanError(f"model `{plan.model.target}` is not time-partitioned; it has no partition range")
    return plan.replace(binding=bind_range(part, values))


def bind_dynamic(watermark: datetime | None, now: datetime | None = None) -> Binding:
    """A watermark window ``(watermark, now]``; with no watermark yet, from the beginning of time."""
    end = now or datetime.now(timezone.utc)
    start = watermark or BEGINNING_OF_TIME
    if end <= start:
        raise PlanError(f"the watermark {start.isoformat()} is not before now ({end.isoformat()})")
    return Binding(kind="dynamic", value=end.isoformat(), start=start, end=end)


def make_plan(
    spec: ModelSpec,
    *,
    substrate: Substrate = "ducklake",
    partition: str | None = None,
    now: datetime | None = None,
    watermark: datetime | None = None,
    columns: tuple[str, ...] | None = None,
) -> Plan:
    """Plan one materialization of ``spec``.

    Args:
        spec: The parsed model.
        substrate: Where the table lives.
        partition: The partition value (time-partitioned models); default the latest complete one.
        now: The run's logical time (default: the current time).
        watermark: The recorded max of a dynamic partition key, if any.
        columns: The SELECT's output columns when the spec cannot tell (``SELECT *``).

    Raises:
        PlanError: a partition value for an unpartitioned model, or a bad value.
    """
    now = now or datetime.now(timezone.utc)
    binding: Binding | None = None
    match spec.partition:
        case TimePartitioning() as part:
            binding = bind_time(part, partition, now)
        case DynamicPartitioning():
            if partition is not None:
                raise PlanError(
                    f"model `{spec.target}` has a dynamic (watermark) partition; it takes no --partition",
                    hint="drop --partition: the window runs from the recorded watermark to now",
                )
            binding = bind_dynamic(watermark, now)
        case None:
            if partition is not None:
                raise PlanError(
                    f"model `{spec.target}` is not partitioned; it takes no --partition",
                    hint=f"add `-- partitioned daily key=<col>` to {spec.path}, or drop --partition",
                )
    run_ts = now if spec.strategy.kind == "snapshot" else None
    return Plan(
        model=spec,
        substrate=substrate,
        binding=binding,
        run_timestamp=run_ts,
        columns=columns if columns is not None else spec.columns_known,
    )
