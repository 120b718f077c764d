"""The seed files of a project: ``seeds/**/*.csv``, each checked before any is loaded.

DuckDB's ``read_csv`` takes its path as a glob, so a file whose name holds ``*``, ``?`` or ``[``
(or ``\\``) is refused rather than read as a pattern that could match other files. A file with no
header line (zero bytes, or blank lines only) is refused too: DuckDB would invent a ``column0``. A
header line without rows is a table with those columns (VARCHAR) and no rows.

A substrate whose lake's own connection runs DuckDB SQL seeds through :class:`SqlSeeder`: each
file's plan (:func:`sql_seed_plan`) replaces the table in one transaction of its materializer.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.config import path_hazard
from lakewrap.errors import Location, PlanError, ProjectError
from lakewrap.plan import Param

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.substrates.protocol import LakeHandle, Materializer


def seed_files(root: Path) -> list[Path]:
    """``root/seeds/**/*.csv`` in order, after checking every one (nothing is loaded if one is bad).

    Raises:
        PlanError: no ``seeds/`` folder, or a file that resolves outside the project.
        ProjectError: a file whose name DuckDB would read as a pattern, or with no header line.
    """
    seeds = root / "seeds"
    if not seeds.is_dir():
        raise PlanError("the project has no seeds/ folder", hint="put CSV files in seeds/<schema>/<table>.csv")
    files = sorted(seeds.rglob("*.csv"))
    for path in files:
        rel = path.relative_to(root).as_posix()
        if not path.resolve().is_relative_to(root):
            raise PlanError(f"{rel} resolves outside the project", hint="keep seed files inside the project")
        bad = path_hazard(path.relative_to(root).as_posix())
        if bad is not None:
            raise ProjectError(f"the seed file's name contains {bad!r}, which DuckDB reads as a file pattern",
                               location=Location(rel), hint="rename the file without * ? [ \\ or control characters")
        if not _has_header(path):
            raise ProjectError("the seed file is empty (no header line)", location=Location(rel),
                               hint="write a header line with the column names, then one line per row")
    return files


def _has_header(path: Path) -> bool:
    with path.open("rb") as fh:
        for line in fh:
            if line.strip():
                return True
    return False


def sql_seed_plan(path: Path, rel: str, schema: str, name: str, substrate: str) -> CompiledPlan:
    """Replace ``schema.name`` with the rows of the CSV file at ``path`` (one transaction of DuckDB SQL)."""
    from lakewrap.execute import statements as stmts

    setup, replace = stmts.seed_table(schema, name)
    statements = (
        CompiledStatement(role="setup", sql=setup),
        CompiledStatement(role="write", sql=replace, effect="insert",
                          params={"path": Param(type="VARCHAR", value=str(path))}),
    )
    return CompiledPlan(model=path.stem, path=rel, target=f"{schema}.{name}", strategy="seed",
                        substrate=substrate, write_path="sql", window=None, idempotent=True,
                        idempotent_note="a re-run replaces the table's content", statements=statements,
                        sql_sha256=CompiledPlan.digest(statements))


class SqlSeeder:
    """``lakewrap seed`` on the lake's own connection: each file's :func:`sql_seed_plan` committed by
    the substrate's materializer (:meth:`lakewrap.substrates.protocol.Substrate.seeder`)."""

    def __init__(self, lake: LakeHandle, materializer: Materializer, substrate: str) -> None:
        self.lake, self.materializer, self.substrate = lake, materializer, substrate

    def connect(self) -> Any:
        return self.lake.connect()

    def plan(self, path: Path, rel: str, schema: str, name: str) -> CompiledPlan:
        return sql_seed_plan(path, rel, schema, name, self.substrate)

    def materialize(self, con: Any, compiled: CompiledPlan) -> Result:
        return self.materializer.materialize(con, compiled)
