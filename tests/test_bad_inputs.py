"""Bad inputs at run time: each gives a clear error and leaves the lake exactly as it was.

Every case starts from the same lake (the project of ``lakeproject.py`` plus a literal model,
seeded and run for three days), breaks one thing, and runs one command twice: through the CLI
(exit code 1 for a model, config or run error, 2 for bad usage; the message on stderr) and through
the Python API (an exception or a failed result with the same message). After each, the lake must
hold the same snapshots (none new) and the same rows (a digest of every table and view, lakewrap's
state and fence tables included), read by an :class:`~lakeproject.Inspector` that does not go
through lakewrap.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import lakewrap
from lakeproject import Inspector, cli, write_project
from lakewrap.errors import LakewrapError

AUDIT = """\
-- partitioned daily key=created_at
CREATE TABLE IF NOT EXISTS main.audit (created_at TIMESTAMP, n BIGINT);
DELETE FROM main.audit WHERE created_at >= $partition_start AND created_at < $partition_end;
INSERT INTO main.audit SELECT created_at, count(*) FROM raw.orders
WHERE created_at >= $partition_start AND created_at < $partition_end GROUP BY created_at;
"""
CANARY = "CANARY-7f3a9c"  # a credential a user put where it does not belong: never echoed


@pytest.fixture(scope="module")
def inspector() -> Iterator[Inspector]:
    ins = Inspector()
    try:
        yield ins
    finally:
        ins.close()


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory, inspector: Inspector) -> tuple[Path, Path, Any]:
    """(work folder, pristine copy, lake state): the lake's catalog stores its absolute data path,
    so every case restores the pristine copy into the same work folder."""
    work = tmp_path_factory.mktemp("bad") / "project"
    work.mkdir()
    write_project(work, 1, toml="[lake]\ndata_inlining_row_limit = 0\n")
    (work / "models" / "audit.sql").write_text(AUDIT)
    assert cli("seed", "--project", str(work))[0] == 0
    code, _, err = cli("run", "--project", str(work), "--start", "2024-01-01", "--end", "2024-01-03",
                       "--now", "2024-01-05T00:00:00Z")
    assert code == 0, err
    pristine = work.parent / "pristine"
    shutil.copytree(work, pristine)
    return work, pristine, inspector.state(work)


@pytest.fixture
def project(baseline: tuple[Path, Path, Any]) -> Path:
    work, pristine, _ = baseline
    shutil.rmtree(work)
    shutil.copytree(pristine, work)
    return work


# --- how a case breaks the project ---------------------------------------------------------------


def edit(rel: str, old: str, new: str) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        text = path.read_text()
        assert old in text, (rel, old)
        path.write_text(text.replace(old, new))
    return apply


def write(rel: str, content: str | bytes) -> Callable[[Path], None]:
    def apply(root: Path) -> None:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    return apply


def only_seed(content: str | bytes) -> Callable[[Path], None]:
    """Leave one seed file, ``seeds/raw/orders.csv``, holding ``content`` (the others would commit)."""
    def apply(root: Path) -> None:
        shutil.rmtree(root / "seeds")
        write("seeds/raw/orders.csv", content)(root)
    return apply


@contextmanager
def held_catalog(root: Path) -> Iterator[dict[str, int]]:
    """Another process holds the DuckDB-file catalog open (as a running `lakewrap run` would)."""
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from lakewrap.execute.lake import Lake
        con = Lake.open(Path({str(root)!r})).connect()
        print("ready", flush=True)
        sys.stdin.read()
        con.close()
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield {"pid": proc.pid}
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)


# --- the cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    id: str
    args: list[str]  # lakewrap <command> [args...] (--project is added)
    code: int  # the CLI's exit code
    messages: list[str]  # each must be in the CLI's stderr and in the API's error
    mutate: Callable[[Path], None] | None = None
    around: Callable[[Path], AbstractContextManager[dict[str, int]]] | None = None
    api: bool = True  # also through lakewrap.Project
    absent: list[str] = field(default_factory=list)  # must appear nowhere

    def __str__(self) -> str:
        return self.id


DI = "models/sales/daily_revenue.sql"
MG = "models/sales/orders.sql"
RUN_DI = ["run", "daily_revenue", "--partition", "2024-01-01"]
RUN_MG = ["run", "sales.orders", "--partition", "2024-01-01"]
RUN_AUDIT = ["run", "audit", "--partition", "2024-01-01"]
S3_TOML = '[lake]\ndata_path = "s3://bucket/lake/"\n[lake.s3]\n'

CASES = [
    # a model fails inside its transaction: exit 1, the error names the model file
    Case("missing-upstream-table", ["run", "+daily_revenue", "--partition", "2024-01-01"], 1,
         [MG, "Table with name orderz does not exist", "an upstream model failed"],
         edit(MG, "FROM raw.orders", "FROM raw.orderz")),
    Case("type-drift-is-refused-by-on-schema-change", RUN_DI, 1,
         [DI, "column `orders` is BIGINT in the table but the SELECT returns VARCHAR", "on_schema_change"],
         edit(DI, "count(*) AS orders", "'many' AS orders")),
    Case("duplicate-keys", RUN_MG, 1,  # its unique_key lacks the partition key: refused within one partition
         [MG, "1 unique_key (order_id) values occur more than once in one partition, e.g. (1)"],
         edit(MG, " dedupe=latest_by(updated_at)", "")),
    Case("null-keys", RUN_MG, 1, [MG, "1 rows have a NULL unique_key (order_id)"],
         edit(MG, "SELECT order_id,", "SELECT CASE WHEN order_id = 2 THEN NULL ELSE order_id END AS order_id,")),
    Case("rows-outside-the-window", RUN_DI, 1, [DI, "rows have order_day outside the partition window"],
         edit(DI, "AND created_at < $partition_end", "")),
    Case("empty-result-with-strict", [*RUN_DI, "--strict"], 1,
         [DI, "the result is empty but the partition had 2 rows", "without --strict"],
         edit(DI, "< $partition_end", "< $partition_end AND false")),
    Case("unknown-column-binder-error", RUN_DI, 1, [DI, "Binder Error", '"statuz" not found'],
         edit(DI, "status,", "statuz,")),
    Case("new-column-is-refused-by-on-schema-change", RUN_DI, 1,
         [DI, "new column `extra` (INTEGER)", "nothing was written"], edit(DI, "status,", "status, 1 AS extra,")),
    Case("division-by-zero", RUN_DI, 1, [DI, "Conversion Error", "value inf"],
         edit(DI, "count(*) AS orders", "CAST(count(*) / 0 AS BIGINT) AS orders")),
    Case("conversion-error", RUN_MG, 1, [MG, "Could not convert string 'placed' to INT32"],
         edit(MG, "SELECT order_id,", "SELECT CAST(status AS INTEGER) AS order_id,")),
    Case("literal-second-statement-fails", RUN_AUDIT, 1, ["models/audit.sql", "Could not convert string 'x'"],
         edit("models/audit.sql", "count(*) FROM", "count(*) + CAST('x' AS INTEGER) FROM")),
    Case("literal-second-statement-binder-error", RUN_AUDIT, 1,
         ["models/audit.sql", "Binder Error", '"nosuch" not found'],
         edit("models/audit.sql", "count(*) FROM", "count(nosuch) FROM")),
    Case("model-header-typo", RUN_MG, 1, [f"{MG}:2:4", "did you mean `partitioned`"],
         edit(MG, "-- partitioned", "-- partitoned")),
    # seeds that cannot be parsed
    Case("seed-ragged-rows", ["seed"], 1, ["seeds/raw/orders.csv", "CSV"],
         only_seed("order_id,customer_id\n1,2\n3,4,5\n")),
    Case("seed-type-changes-late", ["seed"], 1,  # at the file's line, as DuckDB's store_rejects places it
         ["seeds/raw/orders.csv:30002:1: value 'x' of column `order_id` does not convert to BIGINT"],
         only_seed("order_id,amount\n" + "1,2\n" * 30000 + "x,3\n")),
    Case("seed-not-utf8", ["seed"], 1, ["seeds/raw/orders.csv", "not utf-8"],
         only_seed(b"order_id,name\n1,\xff\xfe\n")),
    # seed files are checked before the first is loaded (a re-seed of the good ones would commit)
    Case("seed-name-is-a-glob", ["seed"], 1, ["seeds/raw/ord*.csv", "which DuckDB reads as a file pattern"],
         write("seeds/raw/ord*.csv", "order_id\n999\n")),
    Case("seed-name-with-a-bracket", ["seed"], 1, ["seeds/raw/[o]rders.csv", "which DuckDB reads as a file pattern"],
         write("seeds/raw/[o]rders.csv", "order_id\n999\n")),
    Case("seed-empty-file", ["seed"], 1, ["seeds/raw/zzz.csv: the seed file is empty (no header line)"],
         write("seeds/raw/zzz.csv", "")),
    Case("seed-blank-lines-only", ["seed"], 1, ["seeds/raw/zzz.csv: the seed file is empty (no header line)"],
         write("seeds/raw/zzz.csv", "\n \n")),
    # lakewrap.toml: exit 1, located in the file, credentials never echoed
    Case("toml-syntax", ["run"], 1, ["lakewrap.toml:1:6", "not valid TOML"], write("lakewrap.toml", "[lake\n")),
    Case("toml-syntax-on-a-credential-line", ["run"], 1, ["lakewrap.toml:3", "not valid TOML"],
         write("lakewrap.toml", f'[lake]\ncatalog = "postgres"\ndsn = "dbname=x password={CANARY}\n'),
         absent=[CANARY]),
    Case("toml-unknown-key", ["run"], 1, ["lakewrap.toml:2", "unknown key `lake.catalgo`"],
         write("lakewrap.toml", '[lake]\ncatalgo = "sqlite"\n')),
    Case("toml-unknown-catalog", ["run"], 1,
         ["lakewrap.toml:2", "lake.catalog", "Input should be 'duckdb', 'sqlite' or 'postgres'"],
         write("lakewrap.toml", '[lake]\ncatalog = "mysql"\n')),
    Case("toml-credential-key", ["run"], 1,
         ["lakewrap.toml:4", "must not hold credentials (`secret_access_key`)", "AWS_SECRET_ACCESS_KEY"],
         write("lakewrap.toml", f'{S3_TOML}secret_access_key = "{CANARY}"\n'), absent=[CANARY]),
    Case("toml-password-in-dsn", ["run"], 1, ["lakewrap.toml:3", "do not put a password in the dsn", "PGPASSWORD"],
         write("lakewrap.toml", f'[lake]\ncatalog = "postgres"\ndsn = "dbname=x host=h password={CANARY}"\n'),
         absent=[CANARY]),
    Case("toml-password-in-dsn-uri", ["run"], 1, ["lakewrap.toml:3", "do not put a password in the dsn"],
         write("lakewrap.toml", f'[lake]\ncatalog = "postgres"\ndsn = "postgresql://me:{CANARY}@h/db"\n'),
         absent=[CANARY]),
    Case("toml-password-in-dsn-uri-query", ["run"], 1, ["lakewrap.toml:3", "do not put a password in the dsn"],
         write("lakewrap.toml", f'[lake]\ncatalog = "postgres"\ndsn = "postgresql://me@h/db?password={CANARY}"\n'),
         absent=[CANARY]),
    Case("toml-s3-endpoint-with-scheme", ["run"], 1, ["lakewrap.toml:4", "host:port, without http://"],
         write("lakewrap.toml", f'{S3_TOML}endpoint = "http://127.0.0.1:9000"\n')),
    Case("toml-data-path-through-a-file", ["run"], 1,
         ["cannot attach the lake: cannot create models/audit.sql/data: Not a directory"],
         write("lakewrap.toml", '[lake]\ndata_path = "models/audit.sql/data"\n')),
    Case("toml-postgres-without-dsn", ["run"], 1, ["lakewrap.toml", "a postgres catalog needs dsn"],
         write("lakewrap.toml", '[lake]\ncatalog = "postgres"\n')),
    # the catalog is busy
    Case("held-catalog-lock", RUN_MG, 1, ["the lake catalog .lakewrap/lake.ducklake is held by another process",
                                          "catalog = \"sqlite\" or \"postgres\""], around=held_catalog),
    Case("held-catalog-lock-read-only-query", ["query", "SELECT count(*) FROM sales.orders"], 1,
         ["the lake catalog .lakewrap/lake.ducklake is held by another process"], around=held_catalog),
    # bad usage: exit 2, before anything runs
    Case("bad-partition-value", ["run", "--partition", "2024-13-45"], 2,
         ["`2024-13-45` is not a valid daily partition", "YYYY-MM-DD"]),
    Case("partition-for-an-unpartitioned-model", ["run", "customer_history", "--partition", "2024-01-01"], 2,
         ["models/marts/customer_history.sql", "is not partitioned; it takes no --partition"]),
    Case("start-after-end", ["run", "--start", "2024-01-03", "--end", "2024-01-01"], 2,
         ["the range ends (2024-01-01) before it starts (2024-01-03)"]),
    Case("start-without-end", ["run", "--start", "2024-01-01"], 2, ["give both --start and --end"]),
    Case("partition-and-range", ["run", "--partition", "2024-01-01", "--start", "2024-01-01", "--end", "2024-01-02"],
         2, ["give either --partition or --start/--end"]),
    Case("unknown-selector", ["run", "ordrs"], 2, ["no model matches `ordrs`", "did you mean `orders`"]),
    Case("unknown-selector-method", ["run", "stat:modified"], 2,
         ["unknown selector method `stat:` in `stat:modified`", "did you mean `state:`?"]),
    Case("bad-now", ["run", "--now", "tomorrow"], 2, ["--now `tomorrow` is not an ISO 8601 time"], api=False),
    # `lakewrap query` is read-only
    Case("query-insert", ["query", "INSERT INTO sales.orders SELECT * FROM sales.orders"], 2, ["read-only"]),
    Case("query-attach", ["query", "ATTACH 'other.db' AS other"], 2, ["read-only"]),
    Case("query-copy", ["query", "COPY sales.orders TO 'orders.csv'"], 2, ["read-only"]),
    Case("query-two-statements", ["query", "SELECT 1; DELETE FROM sales.orders"], 2, ["exactly one statement"]),
    Case("query-unknown-table", ["query", "SELECT * FROM sales.nope"], 1, ["sales.nope", "does not exist"]),
]


def through_api(root: Path, args: list[str]) -> tuple[bool, str]:
    """Run ``args`` through ``lakewrap.Project``: (failed?, the error text)."""
    from datetime import datetime

    project = lakewrap.Project(root)
    command, rest = args[0], args[1:]
    try:
        if command == "seed":
            report = project.seed()
        elif command == "query":
            project.query(rest[0])
            return False, ""
        else:
            opts: dict[str, Any] = {}
            selectors = []
            it = iter(rest)
            for a in it:
                if a == "--strict":
                    opts["strict"] = True
                elif a == "--now":
                    opts["now"] = datetime.fromisoformat(next(it).replace("Z", "+00:00"))
                elif a.startswith("--"):
                    opts[a[2:]] = next(it)
                else:
                    selectors.append(a)
            report = project.run(selectors, **opts)
    except LakewrapError as exc:
        return True, exc.render()
    errors = [r.error or "" for r in report.results if r.status in ("failed", "skipped")]
    return not report.ok, "\n".join(errors)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_bad_input_fails_cleanly_and_changes_nothing(case: Case, project: Path, inspector: Inspector,
                                                      baseline: tuple[Path, Path, Any]) -> None:
    before = baseline[2]
    if case.mutate is not None:
        case.mutate(project)
    around = case.around(project) if case.around is not None else nullcontext({})
    with around as held:
        code, out, err = cli(case.args[0], "--project", str(project), *case.args[1:])
        api = through_api(project, case.args) if case.api else None
    messages = list(case.messages)
    if "pid" in held:
        messages.append(f"(PID {held['pid']})")

    assert code == case.code, err
    for m in messages:
        assert m in err, f"{m!r} not in stderr:\n{err}"
    assert "Traceback" not in err
    assert str(project) not in out + err  # machine paths are shown relative to the project
    if api is not None:
        failed, text = api
        assert failed, f"the API accepted {case.args}"
        for m in messages:
            assert m in text, f"{m!r} not in the API's error:\n{text}"
    for secret in case.absent:
        assert secret not in out + err + (api[1] if api else "")
        assert not any(secret in p.read_text(errors="replace") for p in (project / "target").rglob("*")
                       if p.is_file())

    snapshots, digest = inspector.state(project)
    assert snapshots == before[0], "a failed command created a snapshot"
    assert digest == before[1], "a failed command changed rows"


def test_the_literal_model_case_guards_a_real_hazard(tmp_path: Path) -> None:
    """Why the binder-error cases matter: asked to COMMIT after a binder error, DuckDB commits the
    statements before it (docs/design.md, "Transaction protocol"). Here the DELETE would have persisted;
    lakewrap rolls back."""
    from conftest import connect_ducklake

    con = connect_ducklake(tmp_path / "lake")
    try:
        con.execute("CREATE TABLE t AS SELECT range AS x FROM range(5)")
        con.execute("BEGIN TRANSACTION")
        con.execute("DELETE FROM t WHERE x < 3")
        with pytest.raises(Exception, match="Binder Error"):
            con.execute("INSERT INTO t SELECT nosuch FROM t")
        con.execute("COMMIT")
        assert con.execute("SELECT count(*) FROM t").fetchone()[0] == 2
    finally:
        con.close()


def test_a_new_model_with_a_missing_upstream_leaves_no_snapshot(project: Path, inspector: Inspector,
                                                                 baseline: tuple[Path, Path, Any]) -> None:
    write("models/sales/broken.sql", "-- materialized table\nSELECT order_id FROM raw.nope\n")(project)
    code, _, err = cli("run", "--project", str(project), "broken")
    assert code == 1 and "models/sales/broken.sql" in err and "nope does not exist" in err
    assert inspector.state(project)[0] == baseline[2][0]


def test_a_partition_is_ignored_by_unpartitioned_models_in_a_mixed_selection(project: Path) -> None:
    """``--partition`` with partitioned and unpartitioned models selected runs the unpartitioned
    ones whole (as ``lakewrap compile`` does); it is only refused when no selected model takes it."""
    report = lakewrap.Project(project).run(["customer_history", "sales.orders"], partition="2024-01-02")
    assert [(r.target, r.partition, r.status) for r in report.results] == [
        ("marts.customer_history", None, "unchanged"), ("sales.orders", "2024-01-02", "success")]


@pytest.mark.parametrize("char", ["\\", "*", "?", "["])
def test_a_project_path_duckdb_would_not_read_literally_is_refused_before_anything_is_written(
        char: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With a backslash in its path, DuckLake wrote the data files to a relative ``.lakewrap/data``
    under the current folder; with ``?`` the catalog could not be committed. Refused first."""
    root = write_project(tmp_path / f"a{char}b" / "project", 1)
    before = sorted(p for p in tmp_path.rglob("*"))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    for args in (["seed"], ["run"], ["query", "SELECT 1"]):
        code, _, err = cli(*args, "--project", str(root))
        assert code == 1 and f"contains {char!r}" in err and "move or rename the folder" in err, err
    assert sorted(p for p in tmp_path.rglob("*") if p != cwd) == before  # nothing written, here or in cwd


def test_spaces_and_quotes_in_the_project_path_work(tmp_path: Path, inspector: Inspector) -> None:
    """The characters that need no refusal: a run writes inside the project only. A header-only
    seed is a table with those columns (VARCHAR) and no rows."""
    root = write_project(tmp_path / "it's a \"lake\"" / "project", 1)
    (root / "seeds" / "raw" / "nothing.csv").write_text("a,b\n")
    assert cli("seed", "--project", str(root))[0] == 0
    code, _, err = cli("run", "--project", str(root), "--start", "2024-01-01", "--end", "2024-01-01",
                       "--now", "2024-01-05T00:00:00Z")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["it's a \"lake\""]
    assert any((root / ".lakewrap" / "data").rglob("*.parquet"))
    code, out, err = cli("query", "SELECT count(*) AS n, string_agg(column_type, ',') AS t FROM "
                         "(DESCRIBE raw.nothing), (SELECT count(*) FROM raw.nothing) AS c(rows) WHERE rows = 0",
                         "--format", "json", "--project", str(root))
    assert code == 0 and json.loads(out) == [{"n": 2, "t": "VARCHAR,VARCHAR"}], (out, err)
