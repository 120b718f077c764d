"""``lakewrap ls``, ``graph`` and ``show``: looking at a project before running it (``docs/looking.md``).

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``); the
work is in :mod:`lakewrap.listing`, :mod:`lakewrap.graph` and :mod:`lakewrap.show`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from lakewrap.cli_io import _say, _show_table, _write, handled, logical_time, project_option


def _cell(value: Any) -> str:
    return "NULL" if value is None else str(value)


@click.command("ls")
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@project_option
@handled
def ls_cmd(selectors: tuple[str, ...], exclude: tuple[str, ...], fmt: str, project: Path) -> None:
    """List the models (strategy, partitioning, tags, path) in dependency order; without selectors
    also the seeds and the sources (tables models read that nothing in the project writes).

    Selectors: name, schema.name, +name, name+, tag:x, path:models/x, state:modified, state:new.
    Reads the model files only; no lake is opened (except for state: selectors).
    """
    from lakewrap.listing import listing, partitioning_text

    found = listing(project, selectors, exclude)
    if fmt == "json":
        _write(json.dumps(found.to_dict(), indent=2) + "\n")
        return
    rows: list[tuple[str, ...]] = []
    for node in found.nodes:
        spec = node.spec
        if spec is not None:
            rows.append(("model", node.name, spec.strategy.kind, partitioning_text(spec) or "-",
                         ",".join(spec.tags) or "-", spec.path))
        else:
            rows.append((node.kind, node.name, "-", "-", "-", node.path or "-"))
    _show_table(("type", "name", "strategy", "partitioning", "tags", "path"), rows)


@click.command("graph")
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--format", "fmt", type=click.Choice(["text", "dot", "mermaid", "json"]), default="text",
              show_default=True, help="text: layers; dot: Graphviz; mermaid: a Mermaid flowchart; json.")
@project_option
@handled
def graph_cmd(selectors: tuple[str, ...], exclude: tuple[str, ...], fmt: str, project: Path) -> None:
    """Print the DAG of the selected models and the seeds and sources they read, layer by layer
    (layer 0 reads nothing in the graph; every edge points to a higher layer)."""
    from lakewrap import graph

    g = graph.graph(project, selectors, exclude)
    if fmt == "json":
        _write(json.dumps(g.to_dict(), indent=2) + "\n")
    else:
        _write({"text": graph.text, "dot": graph.dot, "mermaid": graph.mermaid}[fmt](g))


@click.command("show")
@click.argument("model")
@click.option("--partition", help="The partition whose window the SELECT reads (default: the latest complete one).")
@click.option("--limit", type=click.IntRange(min=0), default=10, show_default=True,
              help="Rows to print (0: the columns only).")
@click.option("--now", "now", help="Logical run time, ISO 8601 (default: the current time).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@project_option
@handled
def show_cmd(model: str, partition: str | None, limit: int, now: str | None, fmt: str, project: Path) -> None:
    """Run MODEL's SELECT read-only and print its column types and first rows; nothing is written.

    With `-- column` contracts, each column is marked against its declaration; exit code 1 when the
    result breaks the contract.
    """
    from lakewrap.show import show

    shown = show(project, model, partition=partition, limit=limit, now=logical_time(now))
    if fmt == "json":
        _write(json.dumps(shown.to_dict(), indent=2, default=str) + "\n")
    else:
        _emit_show(shown)
    if not shown.contract_ok:
        if fmt == "json":
            _say("error:", "the result breaks the model's `-- column` contract", "bold red", stderr=True)
        sys.exit(1)


def _mark(c: Any) -> str:
    """A column against its `-- column` line: ``ok``, or what breaks it."""
    if c.declared is None:
        return "MISMATCH: not declared"
    if c.problem is None:
        return "ok"
    return f"MISMATCH: declared {c.declared}" if c.declared != c.type else "MISMATCH: NULL in the rows shown"


def _emit_show(shown: Any) -> None:
    spec, w = shown.spec, shown.window
    head = f"{spec.target} ({spec.path}, {spec.strategy.kind})"
    if w is not None:
        head += f", partition {w.value}: {w.closed.replace('start', w.start).replace('end', w.end)}"
    _write(head + "\n\n")
    if spec.columns:
        marks = [_mark(c) for c in shown.columns]
        _show_table(("column", "type", "contract"), [(c.name, c.type, m) for c, m in zip(shown.columns, marks,
                                                                                         strict=True)])
    else:
        _show_table(("column", "type"), [(c.name, c.type) for c in shown.columns])
    if shown.limit:
        _write("\n")
        _show_table([c.name for c in shown.columns], [[_cell(v) for v in r] for r in shown.rows])
    n = len(shown.rows)
    if not shown.limit:
        more = "columns only (--limit 0)"
    elif shown.truncated:
        more = f"the first {n} row{'s' if n != 1 else ''} (there are more: --limit N shows N)"
    else:
        more = f"{n} row{'s' if n != 1 else ''}"
    _write(f"\n{more}; read-only, nothing was written\n")
    for problem in shown.problems:
        _say("contract:", problem, "bold red", stderr=True)


def register(group: click.Group) -> None:
    """Add ls, graph and show (``show`` opens the lake, so it takes ``--wait`` too)."""
    from lakewrap.cli_workflow import _wait_option

    for command in (ls_cmd, graph_cmd, show_cmd):
        group.add_command(command)
    if not any(p.name == "wait" for p in show_cmd.params):
        show_cmd.params.append(_wait_option())
