"""The project of the environment tests (tests/test_environments.py on DuckLake,
tests/test_environments_iceberg.py on Iceberg): three table models over one seed, and the
``lakewrap`` command run through click's runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from lakewrap.cli import main

ROWS_V1 = [(1, 10), (2, 20), (3, 30), (4, 40)]
ROWS_V2 = [(1, 11), (2, 25), (5, 50)]

ORDERS = "-- materialized table\nSELECT id, amount FROM raw.orders\n"
BIG = "-- materialized table\nSELECT id, amount * 2 AS doubled FROM sales.orders WHERE amount > 15\n"
TOP = "-- materialized table\nSELECT max(doubled) AS top FROM sales.big\n"


def write_seed(root: Path, rows: list[tuple[int, int]]) -> None:
    (root / "seeds" / "raw").mkdir(parents=True, exist_ok=True)
    (root / "seeds" / "raw" / "orders.csv").write_text("id,amount\n" + "".join(f"{i},{a}\n" for i, a in rows))


def big_of(rows: list[tuple[int, int]], factor: int = 2) -> list[tuple[int, int]]:
    """The reference of sales.big, from the seed rows."""
    return sorted((i, a * factor) for i, a in rows if a > 15)


def make_project(root: Path, toml: str) -> Path:
    """A project at ``root`` with ``toml`` as its lakewrap.toml, the models orders → big → top and the seed."""
    (root / "models" / "sales").mkdir(parents=True)
    (root / "lakewrap.toml").write_text(toml)
    (root / "models" / "sales" / "orders.sql").write_text(ORDERS)
    (root / "models" / "sales" / "big.sql").write_text(BIG)
    (root / "models" / "sales" / "top.sql").write_text(TOP)
    write_seed(root, ROWS_V1)
    return root


def cli(root: Path, *args: str, code: int = 0) -> Result:
    result = CliRunner().invoke(main, [*args, "--project", str(root)])
    assert result.exit_code == code, (args, result.output, result.exception)
    return result


def query(root: Path, env: str, sql: str) -> list[dict[str, Any]]:
    return json.loads(cli(root, "query", "--env", env, "--format", "json", sql).output)


def files(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*") if p.is_file())


def selected(root: Path, *args: str) -> set[str]:
    out = json.loads(cli(root, "compile", "--format", "json", *args).output)
    return {p["target"] for p in out["plans"]}


def build_prod(root: Path) -> None:
    cli(root, "seed", "--env", "prod")
    cli(root, "run", "--env", "prod")
