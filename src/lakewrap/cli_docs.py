"""``lakewrap lineage`` and ``lakewrap docs generate|serve``: looking at a project before running it.

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``).
Neither command writes to the lake; ``docs generate`` writes ``target/docs/``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from lakewrap.cli_io import _say, _write, handled, logical_time, project_option


@click.command("lineage")
@click.argument("column")
@click.option("--upstream", "direction", flag_value="upstream", default=True,
              help="The columns COLUMN is computed from, down to source columns (the default).")
@click.option("--downstream", "direction", flag_value="downstream",
              help="The model columns computed from COLUMN, directly or through other models.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@project_option
@handled
def lineage_cmd(column: str, direction: str, fmt: str, project: Path) -> None:
    """Column-level lineage of COLUMN (schema.model.column, or model.column) over the whole DAG."""
    from lakewrap.lineage import of_project, render_text

    graph = of_project(project)
    rel, col = graph.resolve(column)
    tree = graph.upstream(rel.key, col) if direction == "upstream" else graph.downstream(rel.key, col)
    if fmt == "json":
        out = {"column": tree.name, "direction": direction, "tree": tree.to_dict(),
               **({"sources": tree.leaves() if tree.next else []} if direction == "upstream"
                  else {"computed_from_it": tree.reached()}),
               "problems": graph.problems}
        _write(json.dumps(out, indent=2) + "\n")
        return
    _write(render_text(tree, direction))
    # the warnings of the relations on this tree (JSON lists every relation's)
    on_tree, todo = set(), [tree]
    while todo:
        step = todo.pop()
        on_tree.add(step.name.rpartition(".")[0])
        todo.extend(step.next)
    for key, why in sorted(graph.problems.items()):
        if key in on_tree:
            _say("warning:", f"{key}: {why}", "yellow", stderr=True)


@click.group("docs")
def docs_group() -> None:
    """The project's documentation site: `generate` writes target/docs/, `serve` serves it."""


@docs_group.command("generate")
@click.option("--now", help="Logical time (ISO 8601) for the partitions compiled and the gaps shown.")
@project_option
@handled
def generate_cmd(now: str | None, project: Path) -> None:
    """Write the static site (the DAG, a page per model and source, search, lineage) to target/docs/."""
    from lakewrap.docsite import collect
    from lakewrap.docsite_html import write_site
    from lakewrap.project import require_project

    root = require_project(project)
    data = collect(root, logical_time(now))
    written = write_site(data, root / "target" / "docs")
    _say("wrote:", f"{project / 'target' / 'docs' / 'index.html'} ({len(written)} files; "
         f"{len(data['models'])} models, {len(data['sources'])} sources)", "green")
    if not data["has_lake"]:
        _say("note:", data["lake"], "cyan")


@docs_group.command("serve")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")
@project_option
@handled
def serve_cmd(port: int, project: Path) -> None:
    """Serve target/docs/ on http://127.0.0.1:PORT/ until Ctrl-C."""
    from lakewrap.docsite_serve import serve
    from lakewrap.project import require_project

    root = require_project(project)
    serve(root / "target" / "docs", port, lambda url: _say("serving:", f"{url} (Ctrl-C to stop)", "green"))
    _say("stopped:", "the docs server", "cyan", stderr=True)
    sys.stdout.flush()


def register(group: click.Group) -> None:
    group.add_command(lineage_cmd)
    group.add_command(docs_group)
