"""``lakewrap maintain`` on a real DuckLake: compaction, expiry that spares run records, orphan cleanup.

Orphans are made the two ways a lake gets them: a writer killed with SIGKILL after writing Parquet
files and before COMMIT, and a planted unreferenced file in the data path. Every run record's pinned
snapshot and own snapshot are read (time travel) before and after maintenance and must agree.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import lakewrap
from lakewrap.cli import main
from lakewrap.execute.lake import Lake
from servers import S3, Postgres, moto_s3, postgres  # noqa: F401  (fixtures)

MODEL = """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
"""

MERGE_MODEL = """\
-- materialized incremental
-- partitioned daily key=ts start=2024-01-01
-- unique_key id
SELECT id, ts, v FROM raw.events
WHERE ts >= $partition_start AND ts < $partition_end
"""

# reads the merge model: its compaction must not make it stale
DAILY_MODEL = """\
-- materialized incremental
-- partitioned daily key=day start=2024-01-01
SELECT CAST(date_trunc('day', ts) AS TIMESTAMP) AS day, count(*) AS n, sum(v) AS v FROM sales.ev_m
WHERE ts >= $partition_start AND ts < $partition_end
GROUP BY ALL
"""

CONFIG = """\
[lake]
data_inlining_row_limit = 0

[maintain]
retain_days = 0
keep_last = 1
protect = "{protect}"
orphan_min_age_minutes = 0
delete_threshold = 0.01
"""

KILLED_WRITER = """\
import sys
from pathlib import Path
from lakewrap.execute.lake import Lake
lake = Lake.open(Path(sys.argv[1]))
con = lake.connect()
con.execute("BEGIN TRANSACTION")
con.execute("INSERT INTO raw.events SELECT range + 100000, TIMESTAMP '2024-01-02', 1 FROM range(300000)")
print("written", flush=True)
sys.stdin.read()  # wait to be killed, before COMMIT
"""


def sql(root: Path, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    lake = Lake.open(root)
    con = lake.connect()
    try:
        cur = con.execute(statement, params) if params is not None else con.execute(statement)
        return list(cur.fetchall()) if cur.description else []
    finally:
        lake.close(con)


def storage(root: Path) -> dict[str, int]:
    data = root / ".lakewrap" / "data"
    return {str(p.relative_to(data)): p.stat().st_size for p in data.rglob("*") if p.is_file()}


def time_travel(root: Path) -> dict[tuple[str, str, int], int]:
    """Row counts of the model and its upstream at every snapshot a run record references."""
    lake = Lake.open(root)
    con = lake.connect()
    try:
        out: dict[tuple[str, str, int], int] = {}
        records = con.execute("SELECT run_id, partition_value, pins FROM lakewrap.materializations").fetchall()
        owns = {entry["run_id"] + (part or ""): sid
                for sid, extra in con.execute("SELECT snapshot_id, commit_extra_info FROM lake.snapshots() "
                                              "WHERE commit_extra_info IS NOT NULL").fetchall()
                for entry in json.loads(extra).get("members", [json.loads(extra)])  # a group: its members
                for part in entry.get("batch") or [entry.get("partition")]}  # a range batch: its partitions
        for run_id, partition, pins in records:
            for label, snap in (("pin", json.loads(pins)["snapshot"]), ("own", owns[run_id + partition])):
                for table in ("raw.events", "sales.ev", "sales.ev_m"):
                    try:
                        n = con.execute(f"SELECT count(*) FROM {table} AT (VERSION => {int(snap)})").fetchone()[0]
                    except Exception as exc:  # the model's first pin predates its table; an expiry is not this
                        assert "does not exist" in str(exc), exc
                        n = -1
                    out[(f"{run_id}/{partition}/{label}", table, int(snap))] = n
        return out
    finally:
        lake.close(con)


def make_history(root: Path, protect: str) -> lakewrap.Project:
    (root / "models" / "sales").mkdir(parents=True)
    (root / "models" / "sales" / "ev.sql").write_text(MODEL)
    (root / "models" / "sales" / "ev_m.sql").write_text(MERGE_MODEL)
    (root / "models" / "sales" / "ev_m_daily.sql").write_text(DAILY_MODEL)
    (root / "lakewrap.toml").write_text(CONFIG.format(protect=protect))
    sql(root, "CREATE SCHEMA raw")
    sql(root, "CREATE TABLE raw.events AS SELECT range::INTEGER AS id, TIMESTAMP '2024-01-01' + to_minutes(range) "
              "AS ts, 1 AS v FROM range(4 * 1440)")
    project = lakewrap.Project(root)
    assert project.run(start="2024-01-01", end="2024-01-04").ok
    for i in range(4):  # late rows and deletions, repaired by --stale: small files and delete files pile up
        sql(root, "INSERT INTO raw.events SELECT range + 10000 * (? + 1), TIMESTAMP '2024-01-02 03:00', 2 "
                  "FROM range(50)", [i])
        sql(root, "DELETE FROM raw.events WHERE id % 97 = ?", [i])
        sql(root, "UPDATE raw.events SET v = v + 1 WHERE id % 89 = ?", [i])  # the merge model updates them
        report = project.run(stale=True)
        assert report.ok and report.results
    return project


def kill_writer(root: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "written"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def unknown_files(root: Path) -> list[str]:
    rows = sql(root, "SELECT path FROM ducklake_delete_orphaned_files('lake', dry_run => true, older_than => now())")
    return [r[0] for r in rows]


@pytest.mark.slow
def test_maintain_keeps_every_run_record_readable_and_removes_orphans(tmp_path: Path) -> None:
    project = make_history(tmp_path, "all")
    before_files = storage(tmp_path)
    kill_writer(tmp_path)
    killed = set(storage(tmp_path)) - set(before_files)
    assert killed, "the killed writer left no file"
    planted = tmp_path / ".lakewrap" / "data" / "sales" / "planted-orphan.parquet"
    planted.write_bytes(b"PAR1 not really")
    orphans = {*killed, "sales/planted-orphan.parquet"}
    travel = time_travel(tmp_path)
    snapshots = sql(tmp_path, "SELECT snapshot_id FROM lake.snapshots() ORDER BY 1")
    listing = storage(tmp_path)

    # --dry-run: reports, changes nothing
    dry = project.maintain(dry_run=True)
    assert sql(tmp_path, "SELECT snapshot_id FROM lake.snapshots() ORDER BY 1") == snapshots
    assert storage(tmp_path) == listing
    assert {Path(p).name for p in dry.orphans_removed} == {Path(p).name for p in orphans}
    assert dry.snapshots_expired and [t.table for t in dry.tables] == ["sales.ev", "sales.ev_m", "sales.ev_m_daily"]

    report = project.maintain()
    # the snapshots expired are exactly the dry run's, and none a run record references
    assert report.snapshots_expired == dry.snapshots_expired
    assert not {s for _, _, s in travel} & set(report.snapshots_expired)
    before_ids = {s for (s,) in snapshots}
    after_ids = {s for (s,) in sql(tmp_path, "SELECT snapshot_id FROM lake.snapshots()")}
    assert after_ids & before_ids == before_ids - set(report.snapshots_expired)
    assert all(s > max(before_ids) for s in after_ids - before_ids)  # compaction's own, if any
    assert report.snapshots_after == len(after_ids)
    # every run record can still be read at its pin and at its own snapshot, with the same rows
    assert time_travel(tmp_path) == travel
    # compaction: fewer files in the current snapshot; orphans gone; nothing unknown left
    plain, merged, _ = report.tables  # delete+insert replaces whole files: nothing to compact
    assert (plain.data_files_before, plain.delete_files_before) == (plain.data_files_after, 0)
    assert merged.delete_files_before > 0 and merged.rewritten > 0 and merged.data_files_after is not None
    assert merged.data_files_after < merged.data_files_before and merged.delete_files_after == 0
    assert merged.data_files_after <= 4  # one per day partition
    assert {Path(p).name for p in report.orphans_removed} == {Path(p).name for p in orphans}
    assert not planted.exists() and not (set(storage(tmp_path)) & killed)
    assert unknown_files(tmp_path) == []
    assert report.storage_files_before == len(listing)
    assert report.storage_files_after == len(storage(tmp_path))
    # compaction rewrote rows without changing them: nothing downstream is stale
    assert [s.stale for s in project.status()] == [[], [], []]
    # the model still reads right after maintenance, and a later --stale still works
    sql(tmp_path, "INSERT INTO raw.events VALUES (99999, TIMESTAMP '2024-01-03 01:00', 5)")
    again = project.run(stale=True)
    assert again.ok and sorted((r.target, r.partition) for r in again.results) == [
        ("sales.ev", "2024-01-03"), ("sales.ev_m", "2024-01-03"), ("sales.ev_m_daily", "2024-01-03")]
    live = sql(tmp_path, "SELECT id, ts, v FROM raw.events WHERE ts >= '2024-01-01' AND ts < '2024-01-05' ORDER BY 1")
    assert sql(tmp_path, "SELECT id, ts, v FROM sales.ev ORDER BY 1") == live
    # the merge model keeps rows deleted upstream (no hard deletes); the live ones match
    assert sql(tmp_path, "SELECT id, ts, v FROM sales.ev_m WHERE id IN (SELECT id FROM raw.events) ORDER BY 1") == live


@pytest.mark.slow
def test_protect_latest_frees_storage_and_keeps_the_latest_builds(tmp_path: Path) -> None:
    project = make_history(tmp_path, "latest")
    travel = time_travel(tmp_path)
    before = storage(tmp_path)
    report = project.maintain()
    after = storage(tmp_path)
    assert len(after) < len(before)  # superseded builds' files are gone
    assert len(report.old_files_removed) > 0
    latest = {(run, part) for run, part in sql(
        tmp_path, "SELECT run_id, partition_value FROM lakewrap.materializations "
                  "QUALIFY row_number() OVER (PARTITION BY partition_value ORDER BY committed_at DESC) = 1")}
    now = time_travel_latest(tmp_path, latest)
    assert now and all(travel[k] == v for k, v in now.items())


def time_travel_latest(root: Path, latest: set[tuple[str, str]]) -> dict[tuple[str, str, int], int]:
    """``time_travel`` for the latest record of each partition only (the others may be expired)."""
    lake = Lake.open(root)
    con = lake.connect()
    try:
        out: dict[tuple[str, str, int], int] = {}
        records = con.execute("SELECT run_id, partition_value, pins FROM lakewrap.materializations").fetchall()
        for run_id, partition, pins in records:
            if (run_id, partition) not in latest:
                continue
            snap = int(json.loads(pins)["snapshot"])
            n = con.execute(f"SELECT count(*) FROM raw.events AT (VERSION => {snap})").fetchone()[0]
            out[(f"{run_id}/{partition}/pin", "raw.events", snap)] = n
        return out
    finally:
        lake.close(con)


def test_maintain_cli_and_config_validation(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "lakewrap.toml").write_text("[maintain]\nprotect = \"none\"\n")
    out = CliRunner().invoke(main, ["maintain", "--project", str(tmp_path)])
    assert out.exit_code != 0 and "maintain.protect" in out.output
    (tmp_path / "lakewrap.toml").write_text("[maintain]\nretain_days = 0\nkeep_last = 1\norphan_min_age_minutes = 0\n")
    sql(tmp_path, "CREATE TABLE t AS SELECT 1 AS x")
    planted = tmp_path / ".lakewrap" / "data" / "stray.parquet"
    planted.write_bytes(b"x")
    out = CliRunner().invoke(main, ["maintain", "--dry-run", "--project", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert "would remove 0 old and 1 orphan files" in out.output and planted.exists()
    out = CliRunner().invoke(main, ["maintain", "--project", str(tmp_path)])
    assert out.exit_code == 0 and "remove 0 old and 1 orphan files" in out.output and not planted.exists()


# --- the other catalogs and S3 -------------------------------------------------------------------

CATALOG_CASES = [
    pytest.param("sqlite", False, id="sqlite"),
    pytest.param("postgres", False, marks=pytest.mark.postgres, id="postgres"),
    pytest.param("duckdb", True, id="s3-duckdb"),
    pytest.param("postgres", True, marks=[pytest.mark.postgres, pytest.mark.slow], id="s3-postgres"),
]


@pytest.mark.parametrize(("catalog", "on_s3"), CATALOG_CASES)
def test_stale_and_maintain_on_each_catalog(catalog: str, on_s3: bool, tmp_path: Path,
                                            request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = ["[lake]", "data_inlining_row_limit = 0"]
    s3: S3 | None = None
    bucket = f"lake-{catalog}-{os.getpid()}"
    if catalog == "sqlite":
        lines.append('catalog = "sqlite"')
    elif catalog == "postgres":
        pg: Postgres = request.getfixturevalue("postgres")
        lines += ['catalog = "postgres"', f'dsn = "{pg.create_database(f"stale_{os.getpid()}_{int(on_s3)}")}"']
        monkeypatch.setenv("PGPASSWORD", pg.password)
    elif on_s3:
        lines.append('path = "catalog/lake.ducklake"')
    if on_s3:
        s3 = request.getfixturevalue("moto_s3")
        s3.create_bucket(bucket)
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", s3.key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", s3.secret)
        lines += [f'data_path = "s3://{bucket}/warehouse/"', "", "[lake.s3]", f'endpoint = "{s3.endpoint}"',
                  'url_style = "path"', "use_ssl = false"]
    root = tmp_path / "project"
    (root / "models" / "sales").mkdir(parents=True)
    (root / "models" / "sales" / "ev.sql").write_text(MODEL)
    (root / "models" / "sales" / "ev_m.sql").write_text(MERGE_MODEL)
    (root / "lakewrap.toml").write_text("\n".join(lines) + "\n\n" + CONFIG.format(protect="all").split("\n\n", 1)[1])
    sql(root, "CREATE SCHEMA raw")
    sql(root, "CREATE TABLE raw.events AS SELECT range::INTEGER AS id, TIMESTAMP '2024-01-01' + to_minutes(range * 30) "
              "AS ts, 1 AS v FROM range(4 * 48)")
    project = lakewrap.Project(root)
    assert project.run(start="2024-01-01", end="2024-01-04").ok
    sql(root, "INSERT INTO raw.events VALUES (1000, TIMESTAMP '2024-01-03 05:00', 7)")
    sql(root, "UPDATE raw.events SET v = 3 WHERE id = 5")  # 2024-01-01
    report = project.run(stale=True)
    assert sorted((r.target, r.partition) for r in report.results) == [
        ("sales.ev", "2024-01-01"), ("sales.ev", "2024-01-03"),
        ("sales.ev_m", "2024-01-01"), ("sales.ev_m", "2024-01-03")]
    travel = time_travel(root)
    if s3 is not None:
        s3.client().put_object(Bucket=bucket, Key="warehouse/sales/planted-orphan.parquet", Body=b"x")
    else:
        (root / ".lakewrap" / "data" / "sales" / "planted-orphan.parquet").write_bytes(b"x")
    dry = project.maintain(dry_run=True)
    assert [Path(p).name for p in dry.orphans_removed] == ["planted-orphan.parquet"]
    done = project.maintain()
    assert done.snapshots_expired == dry.snapshots_expired and done.snapshots_expired
    assert [Path(p).name for p in done.orphans_removed] == ["planted-orphan.parquet"]
    assert done.storage_files_after < done.storage_files_before
    assert time_travel(root) == travel
    assert [s.stale for s in project.status()] == [[], []]
    if s3 is not None:
        assert "warehouse/sales/planted-orphan.parquet" not in s3.keys(bucket)
