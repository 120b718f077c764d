"""Printable forms of compiled plans: annotated SQL for people, JSON for tools.

The one renderer of the plan transcript: ``compile``, ``compile --as-of`` (its header,
:func:`as_of_sql`), ``restore --dry-run`` and the goldens print through :func:`plan_sql`. Where a
substrate's transcript differs (setup statements before ``BEGIN``, how reads are pinned), it says
so in its :class:`~lakewrap.substrates.protocol.Transcript`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lakewrap import __version__
from lakewrap.compilers.artifacts import CompiledPlan, CompileOutput, PlannedCommit
from lakewrap.plan import Param

if TYPE_CHECKING:
    from lakewrap.provenance import RunOrSnapshot
    from lakewrap.substrates.protocol import Transcript

RULE = "-- " + "=" * 97


def _param(name: str, p: Param) -> str:
    quoted = p.value.replace("'", "''")
    return f"${name} = {p.type} '{quoted}'"


def plan_sql(plan: CompiledPlan, *, batches: bool = False, commit: str | None = None) -> str:
    """One plan as SQL: a header comment, then ``BEGIN``, each statement with its parameters, ``COMMIT``.
    ``batches`` (``compile --start/--end``): the header says whether a range backfill batches it, and why;
    ``commit``: which commit of the run writes it (:mod:`lakewrap.commitplan`)."""
    lines = [RULE, f"-- model:      {plan.path}", f"-- target:     {plan.target}",
             f"-- strategy:   {plan.strategy} (substrate {plan.substrate}, write path {plan.write_path})"]
    if plan.window is not None:
        w = plan.window
        bounds = f"[{w.start}, {w.end})" if w.closed == "[start, end)" else f"({w.start}, {w.end}]"
        extra = f", lookback {w.lookback}" if w.lookback else ""
        label = "watermark" if w.kind == "dynamic" else w.value
        if w.partitions:  # a batch of a range backfill (lakewrap.batches)
            label = (f"{w.partitions[0].value}..{w.partitions[-1].value} "
                     f"(a batch of {len(w.partitions)}, one state row each)")
        lines.append(f"-- partition:  {label}  window {bounds}{extra}")
    else:
        lines.append("-- partition:  (none: the whole table)")
    verdict = {True: "yes", False: "NO", None: "unknown"}[plan.idempotent]
    lines.append(f"-- idempotent: {verdict} ({plan.idempotent_note})")
    if batches and plan.separable is not None:  # whether a range backfill batches it (compilers/separable.py)
        sep = plan.separable
        lines.append(f"-- batches:    yes, batch={sep.batch} unless --batch-size ({sep.reason})" if sep.proven
                     else f"-- batches:    NO, per partition ({sep.reason})")
    if commit is not None:
        lines.append(f"-- commit:     {commit}")
    lines += [f"-- sql_sha256: {plan.sql_sha256}", RULE]
    # e.g. Iceberg through DuckDB SQL: the leading setup statements (namespaces, the state table) run
    # before BEGIN, since a table cannot be created in a namespace created in the same transaction.
    early = 0
    if transcript_of(plan).setup_before_begin:
        while early < len(plan.statements) and plan.statements[early].role == "setup":
            early += 1
    if not early:
        lines += ["BEGIN TRANSACTION;", ""]
    for i, st in enumerate(plan.statements, 1):
        if early and i == early + 1:
            lines += ["BEGIN TRANSACTION;", ""]
        head = f"-- [{i}] {st.role}" + (f": {st.note}" if st.note else "")
        lines.append(head)
        if st.params:
            lines.append("-- params: " + ", ".join(_param(k, v) for k, v in st.params.items()))
        lines.append(st.sql.rstrip().rstrip(";") + ";")
        lines.append("")
    n = len(plan.statements)
    for i, op in enumerate(plan.commits, n + 1):
        # pyiceberg operations are not SQL: printed as comments, so the output still runs as SQL
        lines.append(f"-- [{i}] commit: {op.note}" if op.note else f"-- [{i}] commit")
        if op.params:
            lines.append("-- params: " + ", ".join(_param(k, v) for k, v in op.params.items()))
        lines.append(f"--   {op.line()}")
        lines.append("")
    if plan.commits:
        lines.append("-- the table.transaction() commits: one Iceberg catalog commit, isolation serializable,")
        lines.append("-- lakewrap's state (run id, model, partition, strategy, sql_sha256, pins) in its "
                     "snapshot summary")
        lines.append("ROLLBACK;  -- the DuckDB statements above only staged rows; nothing is written through DuckDB")
        return "\n".join(lines) + "\n"
    lines.append("COMMIT;")
    return "\n".join(lines) + "\n"


def transcript_of(plan: CompiledPlan) -> Transcript:
    from lakewrap.substrates.registry import of_plan

    return of_plan(plan.substrate, plan.write_path).transcript


def plans_sql(plans: Sequence[CompiledPlan], *, batches: bool = False,
              commits: Sequence[PlannedCommit] = ()) -> str:
    """The plans in order; with ``commits`` (:mod:`lakewrap.commitplan`), each header says which
    commit of the run writes it, and a footer sums them up."""
    if len(plans) < 2:  # one plan is one commit
        return "\n".join(plan_sql(p, batches=batches) for p in plans)
    from lakewrap.commitplan import footer, header_lines

    heads = header_lines(commits, len(plans))
    return "\n".join(plan_sql(p, batches=batches, commit=heads[i]) for i, p in enumerate(plans)) + \
        "\n" + footer(plans, commits)


def as_of_sql(plans: Sequence[CompiledPlan], ref: RunOrSnapshot) -> str:
    """``compile --as-of``: a header saying how the reads are pinned, then the plans."""
    head = f"-- as of {ref.kind} {ref}: "
    transcript = transcript_of(plans[0]) if plans else None
    head += (transcript.as_of if transcript else "every upstream read is pinned with AT (VERSION => n)") + "\n"
    if transcript is not None and transcript.lists_pins:
        for p in plans:
            head += "".join(f"-- pin: {st.note}\n" for st in p.statements if st.role == "setup"
                            and (st.note or "").startswith("pinned upstream"))
    return head + plans_sql(plans)


def plans_json(plans: Sequence[CompiledPlan], commits: Sequence[PlannedCommit] = ()) -> str:
    return CompileOutput(lakewrap_version=__version__, plans=tuple(plans),
                         commits=tuple(commits)).dump_json(indent=2) + "\n"
