"""``lakewrap unit`` and the unit-test half of ``lakewrap test`` (:mod:`lakewrap.unittests`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from lakewrap.cli_io import _say, _write, handled, project_option


def emit_unit(report: Any, fmt: str) -> None:
    """One line per unit test, then each failure's row diff (text); the report as JSON."""
    if fmt == "json":
        _write(json.dumps({"ok": report.ok, "unit": [r.to_dict() for r in report.results]}, indent=2,
                          default=str) + "\n")
        return
    if not report.results:
        _write("no unit tests (tests/unit/*.toml) for the selected models\n")
        return
    for r in report.results:
        part = f" [{r.partition}]" if r.partition else ""
        if r.status == "pass":
            _say("pass:", f"{r.path}: {r.model}{part}", "green")
        elif r.status == "fail":
            _say("fail:", r.diff(), "red")
        else:
            _say("error:", f"{r.path}: {r.model}{part}: {r.error}", "bold red")
    passed = sum(r.status == "pass" for r in report.results)
    _write(f"unit tests: {passed} passed, {len(report.results) - passed} failed\n")


def register(main: click.Group) -> None:
    @main.command("unit")
    @click.argument("selectors", nargs=-1)
    @click.option("--exclude", multiple=True, help="Selectors to leave out.")
    @click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
    @project_option
    @handled
    def unit_cmd(selectors: tuple[str, ...], exclude: tuple[str, ...], fmt: str, project: Path) -> None:
        """Run the selected models' unit tests (tests/unit/*.toml) in an in-memory DuckDB; no lake is opened.

        Exit code 1 when a unit test's rows differ from its expected rows or it cannot run.
        """
        from lakewrap.unittests import run_unit_tests

        report = run_unit_tests(project, selectors, exclude)
        emit_unit(report, fmt)
        if not report.ok:
            sys.exit(1)
