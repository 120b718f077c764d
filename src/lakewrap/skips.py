"""Which planned steps a run does not run again (``resume``, ``--missing-only``, ``append`` re-runs).

The rules (``docs/running.md``, "What a run does not run again"):

* **resume** and **--missing-only** skip a step only while what it recorded is still true: the
  latest materialization of its partition (of its table, for a whole-table model) was committed
  with the ``sql_sha256`` the model compiles to now (by the resumed run itself, for ``resume``),
  none of the model's upstream tables changed since that materialization's pin in a way that
  reaches it (the rules of :func:`lakewrap.stale.find_stale`: the change feed from the pin, mapped
  through the model's window filter, conservative where it cannot be mapped), and no step it
  depends on runs in this run (a step of the run that rewrites an upstream partition or table
  forces its readers to run).
* **append** steps of a time-partitioned model whose partition is already recorded since the
  table's last full refresh are not run (their rows would be appended a second time) unless the
  run is a ``--full-refresh`` or passes ``--reappend``; a resumed run never appends a partition it
  committed itself twice.

Skipped steps get status ``done`` and a reason; the report lists them under ``not_rerun``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from lakewrap.spec import ModelSpec, TimePartitioning

if TYPE_CHECKING:
    from lakewrap.project import Project
    from lakewrap.substrates.protocol import StepRecords
    from lakewrap.workers import Task

RESUMED = "committed earlier in this run with the same sql_sha256; its inputs did not change since"
MISSING = "already materialized with the same sql_sha256; its inputs did not change since (--missing-only)"
APPENDED = ("append partition already recorded: running it again would append its rows twice "
            "(--reappend appends anyway; --full-refresh rebuilds the table)")


class Skippable(Protocol):
    """What :func:`mark` reads and sets of a scheduler step."""

    index: int
    task: Task
    deps: set[int]
    status: str
    reason: str


def appended(records: Iterable[tuple[str | None, bool, str]]) -> dict[str, set[str]]:
    """The partitions an append table holds, from its records ``(partition, full refresh, run id)``
    oldest first: those recorded since the last full refresh, each with the runs that appended it.
    A range batch that rebuilt the table records every partition it wrote with its commit's full
    refresh: the table is emptied once, at the run's first such record."""
    present: dict[str, set[str]] = {}
    refreshed_by: str | None = None
    for partition, refresh, run_id in records:
        if refresh and run_id != refreshed_by:
            present, refreshed_by = {}, run_id
        if partition is not None:
            present.setdefault(partition, set()).add(run_id)
    return present


def duplicates(present: dict[str, set[str]], partition: str | None, run_id: str, *, reappend: bool) -> bool:
    """Whether appending ``partition`` again would duplicate rows the table already holds: recorded
    by any run, or (``--reappend`` / ``--full-refresh``) by this very run, which a resume replays."""
    if partition is None or partition not in present:
        return False
    return not reappend or run_id in present[partition]


def mark(steps: Sequence[Skippable], selected: Sequence[ModelSpec], project: Project, records: StepRecords, *,
         run_id: str, resuming: bool, missing_only: bool, reappend: bool, full_refresh: bool,
         sha_of: Callable[[ModelSpec, str | None], str | None]) -> None:
    """Set ``status = "done"`` and a reason on the steps the lake already holds, by the substrate's
    ``records`` of its state (:meth:`lakewrap.substrates.protocol.Substrate.step_records`).

    ``sha_of(spec, partition)`` is the ``sql_sha256`` the model compiles to now (None: it does not
    compile; the step runs and reports the error).
    """
    by_target: dict[str, list[Skippable]] = {}
    for s in steps:
        by_target.setdefault(s.task.target, []).append(s)
    skip: dict[int, str] = {}
    if resuming or missing_only:
        candidates = _recorded(by_target, selected, records, run_id, resuming, sha_of)
        if candidates:
            _drop_stale(candidates, by_target, selected, project, records)
        skip = {i: RESUMED if resuming else MISSING for i in candidates}
    for spec in selected:
        mine = by_target.get(spec.target.key, [])
        if spec.strategy.kind != "append" or not isinstance(spec.partition, TimePartitioning) or not mine:
            continue
        present = records.appended(spec.target.key)
        for s in mine:
            if duplicates(present, s.task.partition, run_id, reappend=reappend or full_refresh):
                skip[s.index] = APPENDED
    for s in steps:  # DAG order: a step's dependencies come before it
        # a dependency that runs forces the step (a --full-refresh's first step is a dependency of every
        # later step of its target); an append partition this run committed is never appended twice, and
        # the step that dropped its table was committed with it
        forced = any(d not in skip for d in s.deps)
        if s.index in skip and (not forced or skip[s.index] == APPENDED):
            s.status, s.reason = "done", skip[s.index]
        else:
            skip.pop(s.index, None)


def _recorded(by_target: dict[str, list[Skippable]], selected: Sequence[ModelSpec], records: StepRecords, run_id: str,
              resuming: bool, sha_of: Callable[[ModelSpec, str | None], str | None]) -> set[int]:
    """Steps whose partition's latest record has the SQL the model compiles to now (and, when
    ``resuming``, was committed by the resumed run)."""
    out: set[int] = set()
    for spec in selected:
        mine = by_target.get(spec.target.key, [])
        if not mine:
            continue
        latest = records.latest(spec.target.key)
        if not any(s.task.partition in latest for s in mine):
            continue
        sha = sha_of(spec, mine[0].task.partition)
        for s in mine:
            rec = latest.get(s.task.partition)
            if sha is not None and rec is not None and rec[0] == sha and (not resuming or rec[1] == run_id):
                out.add(s.index)
    return out


def _drop_stale(candidates: set[int], by_target: dict[str, list[Skippable]], selected: Sequence[ModelSpec],
                project: Project, records: StepRecords) -> None:
    """Remove from ``candidates`` the steps whose upstream tables changed since their pin."""
    chosen = [spec for spec in selected if any(s.index in candidates for s in by_target.get(spec.target.key, []))]
    found = records.stale(project, chosen)
    for spec in chosen:
        stale = found[spec.target.key].partitions
        for s in by_target[spec.target.key]:
            if s.task.partition in stale:
                candidates.discard(s.index)
