"""How `lakewrap compile` scales with the number of models, timed as a whole process.

Generates projects of N models forming a DAG (a realistic mix of strategies, each model reading
1-3 upstream models or raw source tables) into a temporary folder, then times

    lakewrap compile --partition 2024-01-02 --project DIR > /dev/null

as a subprocess of this same Python, in three modes:

- ``cold``: the cache folder (``DIR/target``) is deleted before each rep;
- ``warm``: one untimed run fills the cache, then every rep runs with nothing changed;
- ``one-changed``: warm, but one (different) model file is edited before each rep.

Reports median (min-max) wall seconds, models/s and the median CPU seconds (user + system, workers
included) per size and mode as a Markdown table, and writes the raw figures as JSON. CPU time is
the figure to compare across runs on a busy machine; the load average is recorded beside it.
Before timing a size it also checks that the cold and the cached output are the same text (modulo
``$run_timestamp``, which is the wall clock).

Usage:
    python benchmarks/compile_scale.py [--sizes 100,500,2000] [--reps 5] [--out FILE.json]

Goal (2-core machine): 2000 models in under 3 s cold and under 1 s warm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PARTITION = "2024-01-02"
SEED = 20240102

# Share of each kind of model (the mix).
MIX = (
    ("table", 0.20),
    ("view", 0.10),
    ("delete+insert", 0.30),
    ("merge", 0.25),
    ("append", 0.05),
    ("snapshot", 0.10),
)
SCHEMAS = ("staging", "core", "sales", "finance", "marketing", "ops", "marts")
NOUNS = (
    "orders", "customers", "payments", "refunds", "shipments", "invoices", "sessions", "pageviews",
    "carts", "products", "inventory", "returns", "subscriptions", "accounts", "leads", "campaigns",
    "tickets", "reviews", "suppliers", "stores",
)
SOURCES = tuple(f"raw.{n}" for n in NOUNS)
# Every source and model returns these columns (so joins and expressions downstream are well formed).
CORE = ("id", "customer_id", "event_at", "updated_at", "status", "amount")
STATUSES = ("placed", "shipped", "returned", "cancelled", "pending")


@dataclass
class Model:
    index: int
    schema: str
    name: str
    kind: str
    partitioned: bool
    reads: list[str] = field(default_factory=list)

    @property
    def table(self) -> str:
        return f"{self.schema}.{self.name}"

    @property
    def rel(self) -> str:
        return f"models/{self.schema}/{self.name}.sql"


MODES = ("cold", "warm", "one-changed")


def _kinds(n: int, rng: random.Random) -> list[str]:
    """Exactly the mix's shares (rounded), shuffled."""
    kinds: list[str] = []
    for kind, share in MIX:
        kinds += [kind] * round(n * share)
    while len(kinds) < n:
        kinds.append("table")
    kinds = kinds[:n]
    rng.shuffle(kinds)
    return kinds


def plan_project(n: int, seed: int = SEED) -> list[Model]:
    """The models of an n-model project: kinds, names and a DAG over earlier models and sources."""
    rng = random.Random(seed + n)
    models: list[Model] = []
    for i, kind in enumerate(_kinds(n, rng)):
        schema = SCHEMAS[min(len(SCHEMAS) - 1, i * len(SCHEMAS) // n)] if i >= len(NOUNS) else "staging"
        name = f"{NOUNS[i % len(NOUNS)]}_{i:04d}"
        if kind in ("delete+insert", "append"):
            partitioned = True
        elif kind == "merge":
            partitioned = rng.random() < 0.6
        else:
            partitioned = False
        m = Model(i, schema, name, kind, partitioned)
        if i < len(NOUNS):
            m.reads = [SOURCES[i]]
        else:
            wanted = rng.choice((1, 1, 2, 2, 2, 3))
            reads: list[str] = []
            while len(reads) < wanted:
                if rng.random() < 0.12:
                    pick = rng.choice(SOURCES)
                else:
                    # Mostly recent models, so the DAG gets deep as well as wide.
                    lo = max(0, i - max(30, i // 4))
                    pick = models[rng.randrange(lo, i)].table
                if pick not in reads:
                    reads.append(pick)
            m.reads = reads
        models.append(m)
    return models


def model_sql(m: Model, rng: random.Random) -> str:
    """One model file: annotation header plus a SELECT with joins, expressions, CASE and WHERE."""
    header: list[str] = []
    if m.kind == "snapshot":
        if rng.random() < 0.5:
            header.append("-- snapshot strategy=timestamp unique_key=id updated_at=updated_at")
        else:
            header.append("-- snapshot strategy=check unique_key=id check_cols=status,amount hard_deletes=invalidate")
    elif m.kind in ("table", "view"):
        header.append(f"-- materialized {m.kind}")
    else:
        header.append("-- materialized incremental")
        if m.partitioned:
            lookback = " lookback=1" if rng.random() < 0.1 else ""
            header.append(f"-- partitioned daily key=event_at tz=UTC start=2023-01-01{lookback}")
        if m.kind == "merge":
            dedupe = " dedupe=latest_by(updated_at)" if rng.random() < 0.5 else ""
            header.append(f"-- unique_key id{dedupe}")
        elif m.kind == "append":
            header.append("-- append")
    if m.kind != "view":
        header.append("-- test not_null id")
    if m.kind == "table" and rng.random() < 0.5:
        header.append("-- test unique id")
    if rng.random() < 0.3:
        header.append(f"-- test accepted_values status={','.join(STATUSES)}")
    header.append(f"-- tag {m.schema}")
    if rng.random() < 0.5:
        header.append(f'-- description "{m.kind} model {m.name}, reading {len(m.reads)} upstream tables"')

    aliases = ["a", "b", "c"][: len(m.reads)]
    cols = [f"a.{c}" for c in CORE]
    extra_pool = [
        "a.amount * 1.21 AS amount_gross",
        "round(a.amount, 2) AS amount_rounded",
        "upper(a.status) AS status_upper",
        "CAST(date_trunc('day', a.event_at) AS DATE) AS event_date",
        "extract(hour FROM a.event_at) AS event_hour",
        "CASE WHEN a.amount >= 100 THEN 'large' WHEN a.amount >= 10 THEN 'medium' ELSE 'small' END AS size_band",
        "CASE a.status WHEN 'returned' THEN -a.amount ELSE a.amount END AS net_amount",
        "coalesce(a.customer_id, -1) AS customer_key",
        "a.updated_at - a.event_at AS latency",
        "length(a.status) AS status_len",
        "a.status IN ('placed', 'shipped') AS is_open",
        "md5(CAST(a.id AS VARCHAR)) AS id_hash",
        "least(a.amount, 1000) AS amount_capped",
    ]
    for alias in aliases[1:]:
        extra_pool += [
            f"{alias}.amount AS {alias}_amount",
            f"coalesce({alias}.status, 'unknown') AS {alias}_status",
            f"CASE WHEN {alias}.id IS NULL THEN FALSE ELSE TRUE END AS has_{alias}",
            f"a.amount - coalesce({alias}.amount, 0) AS diff_{alias}",
        ]
    want = rng.randint(8, 15) - len(CORE)
    cols += rng.sample(extra_pool, min(want, len(extra_pool)))

    base = m.reads[0]
    use_cte = rng.random() < 0.15
    lines: list[str] = []
    if use_cte:
        lines += [
            "WITH base AS (",
            f"    SELECT * FROM {base}",
            "    WHERE status <> 'cancelled'",
            ")",
        ]
    lines.append("SELECT")
    lines.append(",\n".join(f"    {c}" for c in cols))
    lines.append(f"FROM {'base' if use_cte else base} AS a")
    for alias, up in zip(aliases[1:], m.reads[1:], strict=True):
        join = rng.choice(("LEFT JOIN", "LEFT JOIN", "INNER JOIN"))
        on = f"{alias}.id = a.id" if rng.random() < 0.7 else f"{alias}.customer_id = a.customer_id"
        lines.append(f"{join} {up} AS {alias} ON {on}")
    where: list[str] = []
    if m.partitioned:
        where += ["a.event_at >= $partition_start", "a.event_at < $partition_end"]
    if rng.random() < 0.4:
        where.append("a.amount IS NOT NULL")
    if rng.random() < 0.2:
        where.append("a.status <> 'cancelled'")
    if where:
        lines.append("WHERE " + "\n  AND ".join(where))
    return "\n".join(header) + "\n" + "\n".join(lines) + "\n"


def generate(root: Path, n: int, seed: int = SEED) -> list[Model]:
    """Write an n-model project under ``root`` (which must not exist yet)."""
    models = plan_project(n, seed)
    rng = random.Random(seed * 7 + n)
    for m in models:
        path = root / m.rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(model_sql(m, rng))
    return models


def dag_depth(models: list[Model]) -> int:
    depth: dict[str, int] = {}
    for m in models:
        depth[m.table] = 1 + max((depth.get(r, 0) for r in m.reads), default=0)
    return max(depth.values(), default=0)


# --- timing ---------------------------------------------------------------------------------------


def lakewrap_command() -> list[str]:
    """The console script next to this Python, else ``python -m lakewrap.cli``."""
    script = Path(sys.executable).with_name("lakewrap")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "lakewrap.cli"]


def compile_args(project: Path) -> list[str]:
    return [*lakewrap_command(), "compile", "--partition", PARTITION, "--project", str(project)]


@dataclass
class Run:
    wall: float  # seconds, start to exit
    cpu: float  # user + system seconds of the process and the workers it waited for
    stdout: str = ""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(project: Path, *, capture: bool = False) -> Run:
    """One whole ``lakewrap compile`` process (stdout to /dev/null unless captured)."""
    args = compile_args(project)
    cpu0 = _children_cpu()
    t0 = time.perf_counter()
    proc = subprocess.run(args, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"lakewrap compile failed ({proc.returncode}) on {project}:\n{proc.stderr}")
    return Run(elapsed, _children_cpu() - cpu0, proc.stdout if capture else "")


def clear_cache(project: Path) -> None:
    shutil.rmtree(project / "target", ignore_errors=True)


def edit(project: Path, model: Model, rep: int) -> None:
    """A realistic one-file edit: the model's SQL text changes (a trailing comment line)."""
    path = project / model.rel
    path.write_text(path.read_text() + f"-- edited for rep {rep}\n")


_RUN_TS = re.compile(r"\$run_timestamp = TIMESTAMPTZ '[^']*'")


def check_cache_output(project: Path) -> None:
    """The cached compile must print what the cold compile prints (bar the run timestamp)."""
    clear_cache(project)
    cold = run_once(project, capture=True).stdout
    warm = run_once(project, capture=True).stdout
    if _RUN_TS.sub("$run_timestamp = ?", cold) != _RUN_TS.sub("$run_timestamp = ?", warm):
        raise SystemExit(f"the cached output differs from the cold output on {project}")


def summarize(runs: list[Run], n: int) -> dict[str, Any]:
    walls = [r.wall for r in runs]
    median = statistics.median(walls)
    return {
        "median_s": round(median, 4),
        "min_s": round(min(walls), 4),
        "max_s": round(max(walls), 4),
        "models_per_s": round(n / median, 1),
        "cpu_median_s": round(statistics.median(r.cpu for r in runs), 4),
        "runs_s": [round(w, 4) for w in walls],
        "runs_cpu_s": [round(r.cpu, 4) for r in runs],
    }


def bench_size(workdir: Path, n: int, reps: int, check: bool) -> dict[str, Any]:
    project = workdir / f"project_{n}"
    models = generate(project, n)
    if check:
        check_cache_output(project)
    out: dict[str, Any] = {"size": n, "dag_depth": dag_depth(models),
                           "bytes_of_sql": sum((project / m.rel).stat().st_size for m in models),
                           "loadavg_before": os.getloadavg()[0]}

    cold: list[Run] = []
    for _ in range(reps):
        clear_cache(project)
        cold.append(run_once(project))
    out["cold"] = summarize(cold, n)

    clear_cache(project)
    run_once(project)
    out["warm"] = summarize([run_once(project) for _ in range(reps)], n)

    changed: list[Run] = []
    step = max(1, n // (reps + 1))
    for rep in range(reps):
        edit(project, models[(rep + 1) * step % n], rep)
        changed.append(run_once(project))
    out["one-changed"] = summarize(changed, n)
    out["loadavg_after"] = os.getloadavg()[0]
    print(f"  {n} models: " + ", ".join(f"{m} {out[m]['median_s']:.2f} s" for m in MODES)
          + f" (load average {out['loadavg_before']:.1f} -> {out['loadavg_after']:.1f})", file=sys.stderr)
    return out


def markdown(results: list[dict[str, Any]]) -> str:
    rows = ["| models | mode | median s | min–max s | models/s | CPU s (median) |", "|---:|---|---:|---|---:|---:|"]
    for r in results:
        for mode in MODES:
            s = r[mode]
            rows.append(f"| {r['size']} | {mode} | {s['median_s']:.3f} | {s['min_s']:.3f}–{s['max_s']:.3f} "
                        f"| {s['models_per_s']:,.0f} | {s['cpu_median_s']:.3f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100,500,2000", help="comma-separated model counts")
    parser.add_argument("--reps", type=int, default=5, help="timed runs per size and mode")
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    parser.add_argument("--keep", type=Path, help="generate the projects here and keep them")
    parser.add_argument("--no-check", action="store_true", help="skip the cold-vs-cached output check")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            shutil.rmtree(args.keep / f"project_{n}", ignore_errors=True)
        workdir = args.keep
        cleanup = None
    else:
        cleanup = tempfile.TemporaryDirectory(prefix="lakewrap-bench-")
        workdir = Path(cleanup.name)
    print(f"timing `{' '.join(compile_args(Path('DIR')))}`", file=sys.stderr)
    try:
        results = [bench_size(workdir, n, args.reps, not args.no_check) for n in sizes]
    finally:
        if cleanup is not None:
            cleanup.cleanup()

    table = markdown(results)
    print(table)
    if args.out is not None:
        doc = {
            "command": " ".join(compile_args(Path("DIR"))),
            "reps": args.reps,
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "lakewrap_jobs": os.environ.get("LAKEWRAP_JOBS"),
            "results": results,
        }
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
