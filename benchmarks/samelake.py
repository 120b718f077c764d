"""Shared set-up of the same-lake benchmarks (``dag.py``, ``backfill.py``): one DuckLake, three writers.

A :class:`SameLake` is a work folder holding one DuckLake (a DuckDB-file catalog, or a database
of a throw-away PostgreSQL server as ``tests/servers.py`` starts it; data files in a local
folder) and the three projects that write to it, each into its own schema:

- ``lw/``: a lakewrap project (schema ``lw``), run as ``lakewrap run`` processes;
- ``dbt/``: a dbt project with dbt-core + dbt-duckdb from the pinned venv of ``strategies.py``,
  whose profile attaches the same lake (``attach`` of ``ducklake:<catalog>`` with the same
  ``data_path``; schema ``dbt``);
- ``floor.py``: the hand-written floor, one process and one transaction: ``import duckdb``, the
  statements ``lakewrap shell`` gives to attach the project's lake (``shell.attach_statements``),
  ``BEGIN``, the statements of a JSON file, ``COMMIT`` (schema ``hand``).

Every process is timed whole (wall and CPU seconds, with ``strategies.Bench.run``); the floor also
prints the seconds of its statements after ``ATTACH``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for _p in (ROOT / "benchmarks", ROOT / "tests"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

from strategies import ENV, Bench, dbt_venv, extension_dir, fmt, med, statement_log, versions, wheel_extension  # noqa: E402

__all__ = ["ENV", "Bench", "SameLake", "breakdown_line", "catalog_servers", "fmt", "interleave", "load", "med",
           "tool_versions"]

FLOOR_SCRIPT = '''"""The hand-written floor: one process, one transaction, the statements of a JSON file."""
import json
import sys
import time

import duckdb

ATTACH = {attach!r}
start = time.perf_counter()
con = duckdb.connect(config={{"autoinstall_known_extensions": False, "autoload_known_extensions": False}})
for statement in ATTACH:
    con.execute(statement)
attached = time.perf_counter()
with open(sys.argv[1]) as f:
    statements = json.load(f)
con.execute("BEGIN TRANSACTION")
for statement in statements:
    con.execute(statement)
con.execute("COMMIT")
done = time.perf_counter()
con.close()
print(f"{{done - attached:.6f}} {{attached - start:.6f}}")
'''

DBT_PROJECT = """name: samelake
version: "1.0"
config-version: 2
profile: samelake
model-paths: ["models"]
snapshot-paths: ["snapshots"]
flags:
  send_anonymous_usage_stats: false
  partial_parse: true
"""


def load() -> str:
    """The 1, 5 and 15 minute load averages."""
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


@dataclass
class Catalog:
    """Where a lake's catalog lives: a DuckDB file, or a PostgreSQL database (``dsn`` without password)."""

    kind: str  # "duckdb" | "postgres"
    dsn: str | None = None
    password: str | None = None

    def env(self) -> dict[str, str]:
        return {**ENV, "PGPASSWORD": self.password} if self.password else dict(ENV)


@contextmanager
def catalog_servers(kinds: Sequence[str]) -> Iterator[Callable[[str, str], Catalog]]:
    """``make(kind, name)``: a fresh catalog of that kind; a PostgreSQL server runs while inside."""
    pg = None
    if "postgres" in kinds:
        from servers import start_postgres

        pg = start_postgres()

    def make(kind: str, name: str) -> Catalog:
        if kind == "duckdb":
            return Catalog("duckdb")
        assert pg is not None
        return Catalog("postgres", pg.create_database(name), pg.password)

    try:
        yield make
    finally:
        if pg is not None:
            from servers import stop_postgres

            stop_postgres(pg)


@dataclass
class SameLake:
    """One lake and the lakewrap project, dbt project and floor script writing to it (module docstring)."""

    root: Path
    catalog: Catalog
    verbose: bool = False
    dbt: str = "dbt"
    _bench: Bench | None = field(default=None, repr=False)

    @property
    def lake(self) -> Path:
        return self.root / "lake"

    @property
    def lw(self) -> Path:
        return self.root / "lw"

    @property
    def dbt_dir(self) -> Path:
        return self.root / "dbt"

    @property
    def catalog_target(self) -> str:
        """The ``ATTACH 'ducklake:…'`` target of this lake's catalog."""
        if self.catalog.kind == "postgres":
            return f"postgres:{self.catalog.dsn}"
        return str(self.lake / "lake.ducklake")

    @property
    def bench(self) -> Bench:
        """``strategies.Bench``, for its process runner."""
        if self._bench is None:
            lakewrap = str(Path(sys.executable).parent / "lakewrap")
            self._bench = Bench(self.root, 0, sys.executable, lakewrap, self.dbt, wheel_extension(), self.verbose)
        return self._bench

    # -- set-up --

    def create(self, work: Path, raw_sql: Sequence[str], dbt: bool) -> None:
        """The folder, ``lakewrap.toml``, the lake with its raw tables, the dbt profile, the floor script."""
        self.lw.mkdir(parents=True, exist_ok=True)
        (self.lake / "data").mkdir(parents=True, exist_ok=True)
        data = f"{self.lake / 'data'}/"
        if self.catalog.kind == "postgres":
            toml = f'[lake]\ncatalog = "postgres"\ndsn = "{self.catalog.dsn}"\ndata_path = "{data}"\nalias = "lake"\n'
        else:
            toml = f'[lake]\ncatalog = "duckdb"\npath = "{self.catalog_target}"\ndata_path = "{data}"\nalias = "lake"\n'
        (self.lw / "lakewrap.toml").write_text(toml)
        self.sql(raw_sql)
        from lakewrap.shell import attach_statements

        attach = [s for s in attach_statements(self.lw) if not s.startswith("--")]
        (self.root / "floor.py").write_text(FLOOR_SCRIPT.format(attach=attach))
        if dbt:
            self.dbt = str(dbt_venv(work))
            self._bench = None
            ext = wheel_extension()
            extension_dir(work, ext)
            if self.catalog.kind == "postgres":
                import duckdb

                from lakewrap.execute.extensions import bundled_path

                pg_ext = bundled_path("postgres_scanner", duckdb.__version__)
                assert pg_ext is not None, "pip install duckdb-extension-postgres-scanner"
                extension_dir(work, str(pg_ext))
            self.dbt_dir.mkdir(parents=True, exist_ok=True)
            (self.dbt_dir / "dbt_project.yml").write_text(DBT_PROJECT)
            (self.dbt_dir / "profiles.yml").write_text(f"""samelake:
  target: dev
  outputs:
    dev:
      type: duckdb
      path: ":memory:"
      database: lake
      schema: dbt
      threads: 1
      attach:
        - path: "ducklake:{self.catalog_target}"
          alias: lake
          options:
            data_path: "{data}"
      config_options:
        extension_directory: "{work / 'duckdb_extensions'}"
        autoinstall_known_extensions: false
""")

    def connect(self) -> tuple[Any, Any]:
        """(lake, connection) in this process: set-up and checks only, never timed."""
        os.environ.update(self.catalog.env())
        from lakewrap.execute.lake import Lake

        lake = Lake.open(self.lw)
        return lake, lake.connect()

    def sql(self, statements: Sequence[str]) -> list[list[tuple[Any, ...]]]:
        lake, con = self.connect()
        try:
            out = []
            for st in statements:
                cur = con.execute(st)
                out.append(list(cur.fetchall()) if cur.description else [])
            return out
        finally:
            lake.close(con)

    # -- timed processes --

    def run(self, argv: Sequence[str], cwd: Path) -> dict[str, Any]:
        wall, cpu, out = self.bench.run(argv, cwd, self.catalog.env())
        return {"process": wall, "cpu": cpu, "stdout": out}

    def lakewrap(self, *args: str) -> dict[str, Any]:
        r = self.run([self.bench.lakewrap, "run", *args, "--project", str(self.lw)], self.root)
        results = json.loads((self.lw / "target" / "run_results.json").read_text())
        bad = [x for x in results["results"] if x["status"] != "success"]
        if bad:
            raise RuntimeError(f"lakewrap: {len(bad)} failed: {bad[0].get('error')}")
        r["steps"] = len(results["results"])
        r["attempts"] = sum(int(x.get("attempts", 1) or 1) for x in results["results"])
        errors = [str(e) for x in results["results"] for e in (x.get("attempt_errors") or [])]
        r["attempt_errors"] = errors[:3]
        r.pop("stdout")
        return r

    def breakdown(self) -> dict[str, Any]:
        """Where the last ``lakewrap run``'s seconds went, from its statement logs: the run's wall time
        (``started_at`` to ``finished_at``), the steps' own seconds, and the statements summed by kind."""
        from datetime import datetime

        results = json.loads((self.lw / "target" / "run_results.json").read_text())
        stmts = [x for log in sorted((self.lw / "target" / "run" / results["run_id"]).glob("*.sql"))
                 for x in statement_log(log)]
        kinds: dict[str, list[float]] = {}
        for x in stmts:
            key = "COMMIT" if x["sql"] == "COMMIT;" else ("BEGIN" if x["sql"].startswith("BEGIN") else
                                                         ("bookkeeping" if x["role"] == "lakewrap" else "model SQL"))
            kinds.setdefault(key, [0, 0.0])
            kinds[key][0] += 1
            kinds[key][1] += x["seconds"]
        wall = (datetime.fromisoformat(results["finished_at"]) - datetime.fromisoformat(results["started_at"]))
        return {"run_wall": wall.total_seconds(), "steps_seconds": sum(r["seconds"] for r in results["results"]),
                "statements": {k: {"n": int(v[0]), "seconds": round(v[1], 3)} for k, v in kinds.items()}}

    def dbt_cmd(self, *args: str) -> dict[str, Any]:
        r = self.run([self.dbt, *args, "--project-dir", str(self.dbt_dir), "--profiles-dir", str(self.dbt_dir)],
                     self.dbt_dir)
        rr = json.loads((self.dbt_dir / "target" / "run_results.json").read_text())
        bad = [x for x in rr["results"] if x["status"] not in ("success", "pass")]
        if bad:
            raise RuntimeError(f"dbt: {len(bad)} failed: {bad[0].get('message')}")
        r["steps"] = len(rr["results"])
        r.pop("stdout")
        return r

    def floor(self, statements: Sequence[str], name: str = "floor") -> dict[str, Any]:
        path = self.root / f"{name}.json"
        path.write_text(json.dumps(list(statements)))
        r = self.run([sys.executable, str(self.root / "floor.py"), str(path)], self.root)
        sql_s, attach_s = (float(x) for x in r.pop("stdout").split())
        return {**r, "sql": sql_s, "attach": attach_s}


def breakdown_line(b: dict[str, Any] | None) -> str:
    if not b:
        return ""
    parts = ", ".join(f"{k} {v['seconds']:.2f} s ({v['n']})" for k, v in b["statements"].items())
    return (f"lakewrap's last timed run: {b['run_wall']:.2f} s from start to finish of the run, of which its steps "
            f"{b['steps_seconds']:.2f} s; statements: {parts}")


def interleave(reps: int, runs: dict[str, Callable[[], dict[str, Any]]], before: Callable[[int], None] | None = None,
               log: Callable[[str], None] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Each run once per rep, the order rotated every rep (and reversed every other one)."""
    names = list(runs)
    samples: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for rep in range(reps):
        shift = rep % len(names)
        order = names[shift:] + names[:shift]
        if rep % 2:
            order.reverse()
        if before is not None:
            before(rep)
        for name in order:
            s = runs[name]()
            s["load"] = os.getloadavg()[0]
            samples[name].append(s)
            if log:
                log(f"    rep {rep + 1}/{reps} {name:24s} {s['process']:8.2f} s  (load {s['load']:.1f})")
    return samples


def summary(samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians (min–max) of wall and CPU seconds per run, and per-rep ratios of every pair."""
    out: dict[str, Any] = {n: {"process": med([s["process"] for s in v]), "cpu": med([s["cpu"] for s in v]),
                               "reps": len(v)} for n, v in samples.items()}
    for n, v in samples.items():
        if "sql" in v[0]:
            out[n]["sql"] = med([s["sql"] for s in v])
        if "attempts" in v[0]:
            out[n]["retries"] = sum(s["attempts"] - s["steps"] for s in v)
    ratios = {}
    for a in samples:
        for b in samples:
            if a != b and len(samples[a]) == len(samples[b]):
                pairs = zip(samples[a], samples[b], strict=True)
                ratios[f"{a}/{b}"] = med([x["process"] / y["process"] for x, y in pairs])
    out["ratios"] = ratios
    out["load"] = med([s["load"] for v in samples.values() for s in v])
    return out


def tool_versions(dbt: str | None) -> dict[str, str]:
    return versions(dbt)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)
