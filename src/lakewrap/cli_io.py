"""What every ``lakewrap`` command shares: the error handler, the output (through the one
redactor), tables, ``--now`` and ``--project``. :mod:`lakewrap.cli` and :mod:`lakewrap.cli_provenance`
both import it; neither imports the other back.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timezone
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from lakewrap.errors import LakewrapError, PlanError, SelectionError

F = TypeVar("F", bound=Callable[..., Any])

USAGE_ERRORS = (SelectionError, PlanError)


def _fail(err: LakewrapError, debug: bool) -> None:
    if debug:
        raise err
    code = 2 if isinstance(err, USAGE_ERRORS) else err.exit_code
    if click.get_current_context().params.get("fmt") == "json":  # tools get the error as JSON on stdout
        _write(json.dumps({"ok": False, "exit_code": code, **err.to_dict()}, indent=2) + "\n")
    _say("error:", err.render(), "bold red", stderr=True)
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


def _write(text: str, *, stderr: bool = False) -> None:
    """Everything the command prints goes out here, through the one redactor (lakewrap.redact)."""
    from lakewrap.redact import redact

    (sys.stderr if stderr else sys.stdout).write(redact(text))


def _say(label: str, text: str, style: str, *, stderr: bool = False) -> None:
    """One message line: styled by rich on a terminal, plain text otherwise (no rich import)."""
    stream = sys.stderr if stderr else sys.stdout
    if not stream.isatty():
        _write(f"{label} {text}\n", stderr=stderr)
        return
    from lakewrap.redact import redact

    text = redact(text)
    from rich.console import Console
    from rich.markup import escape

    Console(stderr=stderr, highlight=False, soft_wrap=True).print(f"[{style}]{escape(label)}[/] {escape(text)}")


def _show_table(columns: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None,
                right: Collection[str] = (), styles: Sequence[str | None] = ()) -> None:
    """A table: drawn by rich on a terminal; aligned plain text when piped (scripts, CI, benchmarks).

    ``styles`` colours one row each (on a terminal only). Every cell passes the redactor.
    """
    from lakewrap.redact import redact

    rows = [[redact(v) for v in r] for r in rows]
    if not sys.stdout.isatty():
        widths = [max([len(c), *(len(r[i]) for r in rows)]) for i, c in enumerate(columns)]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(v.rjust(w) if c in right else v.ljust(w)
                             for c, v, w in zip(columns, cells, widths, strict=True)).rstrip()

        out = [title] if title else []
        out += [line(columns), line(["-" * w for w in widths]), *(line(r) for r in rows)]
        _write("\n".join(out) + "\n")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    for col in columns:
        table.add_column(col, justify="right" if col in right else "left")
    for i, row in enumerate(rows):
        table.add_row(*row, style=styles[i] if i < len(styles) else None)
    Console(highlight=False, soft_wrap=True).print(table)


_project = click.option(
    "--project",
    "project",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    show_default="the current directory",
    help="The project folder (holds models/).",
)


def _setenv(variable: str) -> Callable[[click.Context, click.Parameter, str | None], None]:
    """A callback that sets ``variable`` for the command (worker processes inherit it) and puts the
    previous value back when the command ends (in-process callers such as tests run many)."""
    import os

    def callback(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is None:
            return
        before = os.environ.get(variable)
        os.environ[variable] = value

        def restore() -> None:
            if before is None:
                os.environ.pop(variable, None)
            else:
                os.environ[variable] = before

        ctx.call_on_close(restore)

    return callback


def project_option(fn: F) -> F:
    """``--project DIR`` and ``--env NAME`` (``LAKEWRAP_ENV``, docs/environments.md); on commands that
    take selectors also ``--state ENV`` (the lake ``state:`` selectors compare with)."""
    import inspect

    from lakewrap.config_env import ENV_VAR
    from lakewrap.state_select import STATE_VAR

    if "selectors" in inspect.signature(fn).parameters:
        fn = click.option("--state", "state_env", expose_value=False, callback=_setenv(STATE_VAR),
                          help="state:modified/state:new compare with this environment's lake "
                          "(default: the --env one).")(fn)
    fn = click.option("--env", "env_name", expose_value=False, callback=_setenv(ENV_VAR), is_eager=True,
                      help=f"The [env.NAME] of lakewrap.toml to use (default: ${ENV_VAR}).")(fn)
    return _project(fn)  # type: ignore[no-any-return]
