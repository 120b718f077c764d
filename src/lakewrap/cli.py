"""The ``lakewrap`` command: a thin layer over the library.

Each command parses its options, calls one library function and prints. One handler maps
:class:`~lakewrap.errors.LakewrapError` to a red message and an exit code (1: a model or run error;
2: bad usage); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import datetime, timezone
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from lakewrap import __version__
from lakewrap.errors import ConfigError, LakewrapError, PlanError, SelectionError

F = TypeVar("F", bound=Callable[..., Any])

USAGE_ERRORS = (SelectionError, PlanError)


def _fail(err: LakewrapError, debug: bool) -> None:
    if debug:
        raise err
    from rich.console import Console

    Console(stderr=True, highlight=False, soft_wrap=True).print(f"[bold red]error:[/] {err.render()}", markup=True)
    code = 2 if isinstance(err, USAGE_ERRORS) else err.exit_code
    sys.exit(code)


def handled(fn: F) -> F:
    """Run a command body, turning lakewrap errors into a message and an exit code."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(click.get_current_context().find_root().params.get("debug"))
        try:
            return fn(*args, **kwargs)
        except LakewrapError as err:
            _fail(err, debug)

    return wrapper  # type: ignore[return-value]


def logical_time(text: str | None) -> datetime | None:
    """Parse ``--now``; a naive time is taken as UTC."""
    if text is None:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise PlanError(f"--now `{text}` is not an ISO 8601 time", hint="write e.g. 2024-06-01T00:00:00Z") from None
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)


project_option = click.option(
    "--project",
    "project",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default="the current directory",
    help="The project folder (holds models/).",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lakewrap")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """lakewrap: compile annotated SELECTs into the DDL/DML that maintains DuckLake tables."""


@main.command("compile")
@click.argument("selectors", nargs=-1)
@click.option("--exclude", multiple=True, help="Selectors to leave out.")
@click.option("--partition", help="Partition value for partitioned models (e.g. 2024-01-02).")
@click.option("--format", "fmt", type=click.Choice(["sql", "json"]), default="sql", show_default=True)
@click.option("--no-cache", is_flag=True, help="Ignore and do not write target/cache/.")
@click.option("--now", "now", help="Logical run time, ISO 8601 (default: the current time).")
@project_option
@handled
def compile_cmd(
    selectors: tuple[str, ...], exclude: tuple[str, ...], partition: str | None, fmt: str, no_cache: bool,
    now: str | None, project: Path,
) -> None:
    """Print the exact statements a run would execute, per model, in dependency order.

    Selectors: name, schema.name, +name (with upstreams), name+ (with downstreams), tag:x,
    path:models/x. Without selectors, every model. Partitioned models without --partition compile for
    their latest complete partition.
    """
    from lakewrap.compile import compile_project
    from lakewrap.output import plans_json, plans_sql

    if not project.is_dir():
        raise ConfigError(f"project folder `{project}` does not exist")
    plans = compile_project(
        project, selectors, exclude=exclude, partition=partition, now=logical_time(now), use_cache=not no_cache
    )
    out = plans_json(plans) if fmt == "json" else plans_sql(plans)
    sys.stdout.write(out)


if __name__ == "__main__":  # pragma: no cover
    main()
