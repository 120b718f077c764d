"""Whole DAGs on one DuckLake: ``lakewrap run`` vs ``dbt run`` vs a hand-written one-transaction floor.

Three DAGs over ``raw.src`` (ts, id, v, updated_at; 10 days × ``--rows-per-day`` rows):

- ``table50`` and ``table200``: table models in levels of 5 (50 models: 10 levels) or 10 (200:
  20 levels); level 0 reads ``raw.src``, every other model joins two models of the level above on
  ``id``;
- ``mixed``: 40 models in 8 levels of 5, cycling table, delete+insert (``partitioned daily`` on
  ``ts``), merge (``partitioned daily`` + ``unique_key id``) and SCD2 snapshot (timestamp strategy
  on ``updated_at``, whole-source comparison); a snapshot is never read by another model. Run for
  the partition 2024-01-05: lakewrap ``run --partition``, dbt ``build`` with ``--event-time-start/
  end`` (delete+insert is dbt's ``microbatch``, the merge an ``incremental`` ``merge`` filtered on
  the same window by ``var``), the floor with the window written in.

The three write to the same lake (``samelake.py``: a DuckDB-file catalog, or PostgreSQL with
``--catalog postgres``), each in its own schema, the delete+insert and merge targets partitioned
the way lakewrap partitions them (year/month/day of ``ts``). Each tool first builds its targets
once (untimed); then every rep changes 5% of ``raw.src`` (``v`` and a later ``updated_at``, so the
snapshots and merges have work) and runs each tool once, in an order rotated per rep. After rep 1
every target's row count and ``sum(v)`` (snapshots: rows and current rows) are compared across the
three tools.

The floor runs, in one process and one transaction, the statements a hand-written script needs for
the same result: ``CREATE OR REPLACE TABLE … AS``; ``DELETE`` of the day + ``INSERT``; ``MERGE``
from the window's SELECT; the snapshot's changed rows into a TEMP table, ``UPDATE`` of the current
rows they close, ``INSERT`` of the new versions.

Usage:
    python benchmarks/dag.py --dags table50,mixed --reps 3 [--catalog duckdb|postgres] [--out r.json]
    python benchmarks/dag.py --dags table200 --reps 1
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from samelake import SameLake, breakdown_line, catalog_servers, fmt, interleave, load, summary, tool_versions

DAY, NEXT = "2024-01-05", "2024-01-06"
PART = "year(ts), month(ts), day(ts)"
COLS = "ts, id, v, updated_at"


@dataclass(frozen=True)
class Node:
    name: str
    kind: str  # table | di | merge | snapshot
    ups: tuple[str, ...]


def table_dag(n: int, width: int) -> list[Node]:
    nodes = []
    for level in range(n // width):
        for k in range(width):
            ups = () if level == 0 else (f"m{level - 1}_{k}", f"m{level - 1}_{(k + 1) % width}")
            nodes.append(Node(f"m{level}_{k}", "table", ups))
    return nodes


def mixed_dag(levels: int = 8, width: int = 5) -> list[Node]:
    kinds = ("table", "di", "merge", "snapshot")
    nodes: list[Node] = []
    readable: list[str] = []  # the level above's models another model may read (no snapshots)
    for level in range(levels):
        here = []
        for k in range(width):
            kind = kinds[(level * width + k) % 4]
            if level == 0:
                ups: tuple[str, ...] = ()
            elif kind == "table" and len(readable) > 1:
                ups = (readable[k % len(readable)], readable[(k + 1) % len(readable)])
            else:
                ups = (readable[k % len(readable)],)
            node = Node(f"x{level}_{k}", kind, ups)
            nodes.append(node)
            if kind != "snapshot":
                here.append(node.name)
        readable = here
    return nodes


DAGS = {"table50": lambda: table_dag(50, 5), "table200": lambda: table_dag(200, 10), "mixed": mixed_dag,
        "smoke": lambda: mixed_dag(2, 4)}  # smoke: 8 models, to check the harness


def body(node: Node, ref: Any, window: str | None) -> str:
    """The model's SELECT; ``ref(name)`` spells an upstream (``raw`` for the source)."""
    where = f" WHERE ts >= {window[0]} AND ts < {window[1]}" if window else ""
    if not node.ups:
        return f"SELECT ts, id, v + 1 AS v, updated_at FROM {ref('raw')}{where}"
    if len(node.ups) == 1:
        return f"SELECT ts, id, v + 1 AS v, updated_at FROM {ref(node.ups[0])}{where}"
    a, b = (ref(u) for u in node.ups)
    return (f"SELECT a.ts, a.id, a.v + b.v AS v, greatest(a.updated_at, b.updated_at) AS updated_at "
            f"FROM {a} AS a JOIN {b} AS b ON a.id = b.id")


def raw_sql(rows_per_day: int) -> list[str]:
    return ["CREATE SCHEMA IF NOT EXISTS raw",
            "CREATE OR REPLACE TABLE raw.src AS SELECT TIMESTAMP '2024-01-01' + to_microseconds("
            f"CAST(i * (86400000000 // {rows_per_day}) AS BIGINT)) AS ts, CAST(i AS BIGINT) AS id, "
            f"CAST(i % 97 AS BIGINT) AS v, TIMESTAMP '2024-01-01' + to_microseconds(CAST(i * (86400000000 // "
            f"{rows_per_day}) AS BIGINT)) AS updated_at FROM range({rows_per_day * 10}) AS r(i)"]


def delta_sql(rep: int) -> list[str]:
    """5% of the rows change: a new ``v`` and a later ``updated_at`` (later every rep)."""
    return [f"UPDATE raw.src SET v = v + 1, updated_at = TIMESTAMP '2024-06-01' + to_hours({rep + 1}) "
            f"WHERE id % 20 = {rep % 20}"]


# --- the three projects ---------------------------------------------------------------------------


def lakewrap_models(nodes: list[Node]) -> dict[str, str]:
    def ref(name: str) -> str:
        return "raw.src" if name == "raw" else f"lw.{name}"

    out = {}
    window = ("$partition_start", "$partition_end")
    for n in nodes:
        if n.kind == "table":
            out[n.name] = f"-- materialized table\n{body(n, ref, None)}\n"
        elif n.kind == "di":
            out[n.name] = ("-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                           f"{body(n, ref, window)}\n")
        elif n.kind == "merge":
            out[n.name] = ("-- materialized incremental\n-- partitioned daily key=ts start=2024-01-01\n"
                           f"-- unique_key id\n{body(n, ref, window)}\n")
        else:
            out[n.name] = ("-- snapshot strategy=timestamp unique_key=id updated_at=updated_at\n"
                           f"{body(n, ref, None)}\n")
    return out


def dbt_files(nodes: list[Node]) -> dict[str, str]:
    """``models/<name>.sql`` and ``snapshots/<name>.sql``, and ``models/sources.yml``."""
    def ref(name: str) -> str:
        return "{{ source('raw', 'src') }}" if name == "raw" else f"{{{{ ref('{name}') }}}}"

    part = f", partitioned_by=[{', '.join(repr(p.strip()) for p in PART.split(','))}]"
    out = {"models/sources.yml": "version: 2\nsources:\n  - name: raw\n    database: lake\n    schema: raw\n"
                                 "    tables:\n      - name: src\n        config:\n          event_time: ts\n"}
    window = ("'{{ var(\"start\") }}'", "'{{ var(\"end\") }}'")
    for n in nodes:
        if n.kind == "table":
            out[f"models/{n.name}.sql"] = (f"{{{{ config(materialized='table', event_time='ts') }}}}\n"
                                           f"{body(n, ref, None)}\n")
        elif n.kind == "di":
            out[f"models/{n.name}.sql"] = (
                "{{ config(materialized='incremental', incremental_strategy='microbatch', event_time='ts', "
                f"batch_size='day', begin='2024-01-01'{part}) }}}}\n{body(n, ref, None)}\n")
        elif n.kind == "merge":
            out[f"models/{n.name}.sql"] = (
                "{{ config(materialized='incremental', incremental_strategy='merge', unique_key='id', "
                f"event_time='ts'{part}) }}}}\n{body(n, ref, window)}\n")
        else:
            out[f"snapshots/{n.name}.sql"] = (
                f"{{% snapshot {n.name} %}}\n{{{{ config(target_database='lake', target_schema='dbt', "
                "unique_key='id', strategy='timestamp', updated_at='updated_at') }}\n"
                f"{body(n, ref, None)}\n{{% endsnapshot %}}\n")
    return out


def floor_sql(nodes: list[Node], first: bool) -> list[str]:
    """The hand-written statements of one run, in DAG order (``first``: the targets created before)."""
    def ref(name: str) -> str:
        return "raw.src" if name == "raw" else f"hand.{name}"

    window = (f"TIMESTAMP '{DAY}'", f"TIMESTAMP '{NEXT}'")
    out = ["CREATE SCHEMA IF NOT EXISTS hand"] if first else []
    for n in nodes:
        t = f"hand.{n.name}"
        if first and n.kind in ("di", "merge"):
            out += [f"CREATE TABLE {t} (ts TIMESTAMP, id BIGINT, v BIGINT, updated_at TIMESTAMP)",
                    f"ALTER TABLE {t} SET PARTITIONED BY ({PART})"]
        if first and n.kind == "snapshot":
            out.append(f"CREATE TABLE {t} (ts TIMESTAMP, id BIGINT, v BIGINT, updated_at TIMESTAMP, "
                       "valid_from TIMESTAMP, valid_to TIMESTAMP, is_current BOOLEAN)")
        if n.kind == "table":
            out.append(f"CREATE OR REPLACE TABLE {t} AS {body(n, ref, None)}")
        elif n.kind == "di":
            out += [f"DELETE FROM {t} WHERE ts >= {window[0]} AND ts < {window[1]}",
                    f"INSERT INTO {t} {body(n, ref, window)}"]
        elif n.kind == "merge":
            out.append(f"MERGE INTO {t} AS t USING ({body(n, ref, window)}) AS s ON t.id = s.id "
                       "WHEN MATCHED THEN UPDATE SET ts = s.ts, v = s.v, updated_at = s.updated_at "
                       f"WHEN NOT MATCHED THEN INSERT ({COLS}) VALUES (s.ts, s.id, s.v, s.updated_at)")
        else:
            tmp = f"chg_{n.name}"
            out += [f"CREATE TEMP TABLE {tmp} AS SELECT s.* FROM ({body(n, ref, None)}) AS s "
                    f"LEFT JOIN {t} AS c ON c.id = s.id AND c.is_current "
                    "WHERE c.id IS NULL OR s.updated_at > c.updated_at",
                    f"UPDATE {t} AS t SET valid_to = d.updated_at, is_current = false FROM {tmp} AS d "
                    "WHERE t.id = d.id AND t.is_current",
                    f"INSERT INTO {t} BY NAME SELECT *, updated_at AS valid_from, CAST(NULL AS TIMESTAMP) AS valid_to, "
                    f"true AS is_current FROM {tmp}",
                    f"DROP TABLE {tmp}"]
    return out


def write_projects(s: SameLake, nodes: list[Node], dbt: bool) -> None:
    for name, text in lakewrap_models(nodes).items():
        path = s.lw / "models" / "lw" / f"{name}.sql"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    if dbt:
        for rel, text in dbt_files(nodes).items():
            path = s.dbt_dir / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def check(s: SameLake, nodes: list[Node], tools: list[str]) -> dict[str, Any]:
    """Per target: rows and sum(v) (snapshots: rows, current rows) in each tool's schema; all equal?"""
    schemas = {"lakewrap": "lw", "dbt": "dbt", "floor": "hand"}
    current = {"lakewrap": "is_current", "dbt": "dbt_valid_to IS NULL", "floor": "is_current"}
    queries = []
    for n in nodes:
        for tool in tools:
            t = f"{schemas[tool]}.{n.name}"
            queries.append(f"SELECT count(*), count(*) FILTER ({current[tool]}) FROM {t}" if n.kind == "snapshot"
                           else f"SELECT count(*), sum(v) FROM {t}")
    got = iter(s.sql(queries))
    per = {n.name: {tool: list(next(got)[0]) for tool in tools} for n in nodes}
    differ = {k: v for k, v in per.items() if len({json.dumps(x, default=str) for x in v.values()}) > 1}
    return {"agree": not differ, "differ": differ, "rows_in_all_targets": sum(v[tools[0]][0] for v in per.values())}


def bench_dag(work: Path, make: Any, catalog: str, dag: str, reps: int, tools: list[str], rows: int,
              verbose: bool) -> dict[str, Any]:
    nodes = DAGS[dag]()
    root = work / f"{catalog}-{dag}"
    subprocess.run(["rm", "-rf", str(root)], check=True)
    s = SameLake(root, make(catalog, f"dag_{dag}"), verbose)
    s.create(work, raw_sql(rows), "dbt" in tools)
    write_projects(s, nodes, "dbt" in tools)
    mixed = any(n.kind != "table" for n in nodes)
    lw_args = ("--partition", DAY) if mixed else ()
    vars_ = json.dumps({"start": DAY, "end": NEXT})
    dbt_args = (("build", "--vars", vars_, "--event-time-start", DAY, "--event-time-end", NEXT) if mixed
                else ("run",))
    runs = {"lakewrap": lambda: s.lakewrap(*lw_args), "dbt": lambda: s.dbt_cmd(*dbt_args),
            "floor": lambda: s.floor(floor_sql(nodes, first=False))}
    runs = {k: v for k, v in runs.items() if k in tools}

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    log(f"{catalog} {dag}: {len(nodes)} models, first builds (untimed), load {load()}")
    if "floor" in tools:
        s.floor(floor_sql(nodes, first=True), "floor-first")
    for k in runs:
        if k != "floor":
            runs[k]()
    if "dbt" in tools:
        s.dbt_cmd("parse")
    started = load()
    verdict: dict[str, Any] = {}

    def before(rep: int) -> None:
        s.sql(delta_sql(rep))

    samples = interleave(reps, runs, before, log)
    verdict = check(s, nodes, tools)
    where = s.breakdown() if "lakewrap" in tools else None
    log(f"  check: {'all targets agree' if verdict['agree'] else verdict['differ']}")
    return {"dag": dag, "catalog": catalog, "models": len(nodes),
            "kinds": {k: sum(1 for n in nodes if n.kind == k) for k in ("table", "di", "merge", "snapshot")},
            "load_start": started, "load_end": load(), "summary": summary(samples), "check": verdict,
            "lakewrap_breakdown": where, "samples": samples}


def markdown(results: list[dict[str, Any]]) -> str:
    lines = ["| DAG | catalog | models | reps | load (median) | lakewrap run | dbt | floor (process) | floor SQL "
             "| dbt / lakewrap | lakewrap / floor | CPU s: lakewrap, dbt, floor | targets agree |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        sm = r["summary"]

        def cell(t: str, m: str = "process", sm: dict[str, Any] = sm) -> str:
            return fmt(sm[t][m], 2) if t in sm else "–"

        def ratio(k: str, sm: dict[str, Any] = sm) -> str:
            return fmt(sm["ratios"][k], 2) if k in sm["ratios"] else "–"

        reps = next(v["reps"] for k, v in sm.items() if isinstance(v, dict) and "reps" in v)
        lines.append(f"| {r['dag']} | {r['catalog']} | {r['models']} | {reps} | {sm['load']['median']:.1f} | "
                     f"{cell('lakewrap')} | {cell('dbt')} | {cell('floor')} | {cell('floor', 'sql')} | "
                     f"{ratio('dbt/lakewrap')} | {ratio('lakewrap/floor')} | "
                     + ", ".join(f"{sm[t]['cpu']['median']:.2f}" if t in sm else "–"
                                 for t in ("lakewrap", "dbt", "floor"))
                     + f" | {r['check']['agree']} |")
    lines += [""] + [f"- {r['catalog']} {r['dag']}: {breakdown_line(r.get('lakewrap_breakdown'))}" for r in results
                     if r.get("lakewrap_breakdown")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dags", default="table50,mixed", help=f"comma-separated, of {','.join(DAGS)}")
    ap.add_argument("--catalog", default="duckdb", help="duckdb, postgres, or both comma-separated")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tools", default="lakewrap,dbt,floor")
    ap.add_argument("--rows-per-day", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "lakewrap-samelake",
                    help="lakes, projects and the dbt venv (the venv is kept between invocations)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    tools = args.tools.split(",")
    catalogs = args.catalog.split(",")
    results = []
    with catalog_servers(catalogs) as make:
        for catalog in catalogs:
            for dag in args.dags.split(","):
                results.append(bench_dag(work, make, catalog, dag, args.reps, tools, args.rows_per_day,
                                         args.verbose))
                if args.out:
                    args.out.write_text(json.dumps({"results": results}, indent=1, default=str))
    dbt = str(work / "dbt-venv" / "bin" / "dbt") if "dbt" in tools else None
    report = {"versions": tool_versions(dbt), "python": platform.python_version(), "results": results}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1, default=str))
    print(json.dumps(report["versions"]))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
