"""``lakewrap init``, ``clean`` and ``debug``: starting a project, clearing its build output, a bug report;
and ``--wait SECONDS`` on every command that opens a lake.

Registered on the ``lakewrap`` group by :func:`register` (called at the end of ``lakewrap.cli``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import click

from lakewrap.cli_io import _say, _write, handled, project_option
from lakewrap.errors import ConfigError


class _Substrate(click.ParamType):  # type: ignore[type-arg]
    """``--substrate``: a typo gets the did-you-mean hint of every other lakewrap error."""

    name = "ducklake|iceberg"

    def convert(self, value: str, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from lakewrap.errors import choices_hint
        from lakewrap.scaffold import SUBSTRATES

        if value in SUBSTRATES:
            return value
        self.fail(f"unknown substrate `{value}`: {choices_hint(value, SUBSTRATES, 'substrate')}", param, ctx)


@click.command("init")
@click.argument("directory", default=".", type=click.Path(path_type=Path, file_okay=False))
@click.option("--substrate", type=_Substrate(), default="ducklake", show_default=True,
              help="The embedded lake the project starts with.")
@click.option("--force", is_flag=True, help="Write the project's files into a folder that is not empty.")
@handled
def init_cmd(directory: Path, substrate: str, force: bool) -> None:
    """Create a project in DIRECTORY (default: here) that runs at once: `lakewrap seed && lakewrap run`."""
    from lakewrap.scaffold import init_project

    written = init_project(directory, substrate, force=force)
    for path in written:
        _write(f"  {path}\n")
    where = "" if directory == Path(".") else f" --project {directory}"
    _say("created:", f"a {substrate} project; next: lakewrap seed{where} && lakewrap run{where}", "green")


@click.command("clean")
@project_option
@handled
def clean_cmd(project: Path) -> None:
    """Remove the project's target/ folder (logs, cache, run results); nothing else, never the lake."""
    from lakewrap.project import require_project

    root = require_project(project)
    target = root / "target"
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise ConfigError(f"`{target}` is not a folder",
                          hint="remove it by hand; lakewrap clean removes only a target/ folder")
    if not target.exists():
        _say("clean:", f"nothing to remove ({project / 'target'} does not exist)", "cyan")
        return
    shutil.rmtree(target)
    _say("removed:", f"{project / 'target'}", "green")


@click.command("debug")
@project_option
@handled
def debug_cmd(project: Path) -> None:
    """Versions, extension binaries, whether the lake opens, which credentials are set (never their values)."""
    import sys

    from lakewrap.debuginfo import report

    lines = report(project)
    section = None
    for line in lines:
        if line.section != section:
            section = line.section
            _write(f"{section}:\n")
        _write(f"  {line.key}: {line.value}" + ("" if line.ok else "   <- problem") + "\n")
    if not all(line.ok for line in lines):
        sys.exit(1)


def _set_wait(ctx: click.Context, param: click.Parameter, value: float | None) -> None:
    """``--wait``: ``LAKEWRAP_WAIT`` for the command (worker processes inherit it), put back as it
    was when the command ends (an in-process caller runs many commands: `cli_io._setenv`)."""
    if value is not None:
        from lakewrap.cli_io import _setenv
        from lakewrap.execute.lockwait import WAIT_ENV

        _setenv(WAIT_ENV)(ctx, param, f"{value:g}")


def _wait_option() -> click.Option:
    return click.Option(["--wait"], type=click.FloatRange(min=0, max=86400), default=None, expose_value=False,
                        callback=_set_wait, metavar="SECONDS",
                        help="When another process holds the lake's DuckDB-file catalog, wait up to SECONDS "
                        "for it instead of failing at once (also the environment variable LAKEWRAP_WAIT).")


NO_LAKE = ("init", "clean", "debug")


def register(group: click.Group) -> None:
    """Add init, clean and debug, and ``--wait SECONDS`` to every command that opens a lake."""
    for command in (init_cmd, clean_cmd, debug_cmd):
        group.add_command(command)
    for name, command in group.commands.items():
        if name not in NO_LAKE and not any(p.name == "wait" for p in command.params):
            command.params.append(_wait_option())
