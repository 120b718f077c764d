"""The seed files of a project: ``seeds/**/*.csv``, each checked before any is loaded.

DuckDB's ``read_csv`` takes its path as a glob, so a file whose name holds ``*``, ``?`` or ``[``
(or ``\\``) is refused rather than read as a pattern that could match other files. A file with no
header line (zero bytes, or blank lines only) is refused too: DuckDB would invent a ``column0``. A
header line without rows is a table with those columns (VARCHAR) and no rows.

A seed may have a sidecar ``<table>.toml`` beside it (:mod:`lakewrap.seedformat`: dialect, column
types); a sidecar without a CSV of its name is refused. Each seed's bytes are hashed
(``sha256``): ``lakewrap seed`` records the hash in the commit that loads the file and skips a
file whose hash and statements the table's last seed commit recorded (docs/seeds.md).

A substrate whose lake's own connection runs DuckDB SQL seeds through :class:`SqlSeeder`: each
file's plan (:func:`sql_seed_plan`) replaces the table in one transaction of its materializer.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from difflib import get_close_matches
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakewrap.compilers.artifacts import CompiledPlan, CompiledStatement
from lakewrap.config import path_hazard
from lakewrap.errors import Location, PlanError, ProjectError
from lakewrap.plan import Param
from lakewrap.seedformat import CsvFormat, read_format

if TYPE_CHECKING:
    from lakewrap.execute.executor import Result
    from lakewrap.substrates.protocol import LakeHandle, Materializer


@dataclass(frozen=True)
class Seed:
    """One checked seed file: where it is, the table it loads, how it is read, its bytes' hash."""

    path: Path
    rel: str  # relative to the project root
    schema: str
    name: str
    format: CsvFormat
    sha256: str  # of the CSV file's bytes, read just before planning its load

    @property
    def target(self) -> str:
        return f"{self.schema}.{self.name}"


def seeds(root: Path) -> list[Seed]:
    """Every seed of the project at ``root``, checked (files, sidecars, declared columns) before any
    is loaded: ``seeds/raw/orders.csv`` → ``raw.orders``, ``seeds/x.csv`` → ``raw.x``."""
    files = seed_files(root)
    base = root / "seeds"
    csvs = {p.with_suffix("") for p in files}
    for side in sorted(base.rglob("*.toml")):
        if side.with_suffix("") not in csvs:
            rel = side.relative_to(root).as_posix()
            near = get_close_matches(side.stem, [p.stem for p in files if p.parent == side.parent], n=1)
            raise ProjectError(f"{rel} has no CSV file beside it", location=Location(rel),
                               hint=(f"did you mean {side.with_name(near[0] + '.toml').name}? " if near else "")
                               + f"a seed's .toml is named like its CSV: {side.with_suffix('.csv').name}")
    out = []
    for path in files:
        schema, name = seed_target(root, path)
        fmt, _ = read_format(root, path)
        out.append(Seed(path, path.relative_to(root).as_posix(), schema, name, fmt, file_sha256(path)))
    return out


def seed_target(root: Path, path: Path) -> tuple[str, str]:
    """The (schema, table) a seed file loads: ``seeds/raw/orders.csv`` → ``raw.orders``, a file
    directly under ``seeds/`` → schema ``raw``, a deeper one → its first folder and its stem."""
    parts = path.relative_to(root / "seeds").with_suffix("").parts
    return (parts[0], parts[-1]) if len(parts) > 1 else ("raw", parts[0])


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def sql_seed_plan(seed: Seed, substrate: str) -> CompiledPlan:
    """Replace the seed's table with the rows of its CSV file (one transaction of DuckDB SQL)."""
    from lakewrap.execute import statements as stmts

    setup, replace = stmts.seed_table(seed.schema, seed.name, seed.format.read_options())
    statements = (
        CompiledStatement(role="setup", sql=setup),
        CompiledStatement(role="write", sql=replace, effect="insert",
                          params={"path": Param(type="VARCHAR", value=str(seed.path))}),
    )
    return CompiledPlan(model=seed.path.stem, path=seed.rel, target=seed.target, strategy="seed",
                        substrate=substrate, write_path="sql", window=None, idempotent=True,
                        idempotent_note="a re-run replaces the table's content", statements=statements,
                        sql_sha256=CompiledPlan.digest(statements))


class SqlSeeder:
    """``lakewrap seed`` on the lake's own connection: each file's :func:`sql_seed_plan` committed by
    the substrate's materializer (:meth:`lakewrap.substrates.protocol.Substrate.seeder`).

    It keeps no record of a seed's bytes, so every seed loads (``loaded`` is None); a substrate that
    records them subclasses it (DuckLake: ``substrates/ducklake/run.py``)."""

    def __init__(self, lake: LakeHandle, materializer: Materializer, substrate: str) -> None:
        self.lake, self.materializer, self.substrate = lake, materializer, substrate

    def connect(self) -> Any:
        return self.lake.connect()

    def plan(self, seed: Seed) -> CompiledPlan:
        return sql_seed_plan(seed, self.substrate)

    def loaded(self, con: Any, target: str) -> tuple[str, str] | None:
        return None

    def materialize(self, con: Any, compiled: CompiledPlan, *, provenance: dict[str, Any] | None = None) -> Result:
        return self.materializer.materialize(con, compiled)
