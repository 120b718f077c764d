"""A plugin's own ``-- test`` kind, registered through the ``lakewrap.plugins`` entry point of a real
installed distribution (a dist-info folder on ``PYTHONPATH``), compiled and run on a real DuckLake.

The plugin registers the kind's parser with the keyword registry and its failing-rows query with
``lakewrap.compilers.checks.register_kind``; lakewrap runs it like a core kind: inside the
transaction before COMMIT, an ``error`` failure rolls back and is reported with its count.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import duckdb

from helpers import install_dist, site_env
from lakewrap.execute.extensions import bundled_path

PLUGIN = '''
from sqlglot import exp


def register(registry):
    @registry.test_kind("positive", usage="positive <col>", summary="every value of the column is > 0")
    def positive(ann, args, header):
        (arg,) = args
        return {"column": arg.value}

    from lakewrap.compilers import checks

    def failing(plan, compiler, test):
        column = exp.column(test.args["column"], table=checks.ROW, quoted=True)
        return checks.scoped_rows(plan, compiler, exp.LTE(this=column, expression=exp.Literal.number(0)))

    checks.register_kind("positive", failing)
'''

CLI = "from lakewrap.cli import main; main()"
MODEL = "-- materialized table\n-- test positive amount\nSELECT * FROM (VALUES {rows}) AS t(id, amount)\n"


def plugin_site(tmp_path: Path) -> Path:
    return install_dist(tmp_path / "site", "lakewrap_positive", "lakewrap.plugins",
                        "positive = lakewrap_positive:register", PLUGIN)


def lakewrap(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = site_env(site, NO_COLOR="1")
    return subprocess.run([sys.executable, "-c", CLI, *args], capture_output=True, text=True, env=env,
                          timeout=300)


def table_rows(root: Path) -> list[tuple[int, int]] | None:
    con = duckdb.connect(config={"autoinstall_known_extensions": False})
    try:
        con.execute(f"LOAD '{bundled_path('ducklake', duckdb.__version__)}'")
        con.execute(f"ATTACH 'ducklake:{root}/.lakewrap/lake.ducklake' AS lake "
                    f"(DATA_PATH '{root}/.lakewrap/data/', READ_ONLY)")
        try:
            return [tuple(r) for r in con.execute("SELECT id, amount FROM lake.main.t ORDER BY id").fetchall()]
        except duckdb.CatalogException:
            return None
    finally:
        con.close()


def test_a_plugin_test_kind_compiles_fails_the_write_and_passes(tmp_path: Path) -> None:
    site = plugin_site(tmp_path)
    root = tmp_path / "proj"
    (root / "models").mkdir(parents=True)
    model = root / "models" / "t.sql"
    model.write_text(MODEL.format(rows="(1, 5), (2, -1), (3, 0)"))

    compiled = lakewrap(site, "compile", "--project", str(root), "--format", "json", "--no-cache")
    assert compiled.returncode == 0, compiled.stderr
    (plan,) = json.loads(compiled.stdout)["plans"]
    (test,) = [s for s in plan["statements"] if s["role"] == "test"]
    assert '"amount" <= 0' in test["sql"], test["sql"]

    failed = lakewrap(site, "run", "--project", str(root), "--format", "json")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    (result,) = json.loads(failed.stdout)["results"]
    assert result["status"] == "failed"
    (outcome,) = result["tests"]
    assert (outcome["name"], outcome["status"], outcome["failures"]) == ("positive amount", "fail", 2), outcome
    assert table_rows(root) is None, "a failing error-severity test must roll the write back"

    model.write_text(MODEL.format(rows="(1, 5), (2, 7)"))
    passed = lakewrap(site, "run", "--project", str(root), "--format", "json")
    assert passed.returncode == 0, passed.stdout + passed.stderr
    (outcome,) = json.loads(passed.stdout)["results"][0]["tests"]
    assert (outcome["status"], outcome["failures"]) == ("pass", 0), outcome
    assert table_rows(root) == [(1, 5), (2, 7)]

    # without the plugin the kind is unknown: a located error naming the kinds there are
    bare = subprocess.run([sys.executable, "-c", CLI, "compile", "--project", str(root), "--no-cache"],
                          capture_output=True, text=True, timeout=300)
    assert bare.returncode == 1 and "models/t.sql:2" in bare.stderr and "positive" in bare.stderr, bare.stderr
