"""``lakewrap maintain`` on a real Iceberg lake (pyiceberg SqlCatalog on SQLite, local warehouse).

The lake is the provenance tests' history: five strategies over three versions of a source. Orphans
are made the two ways a lake gets them: a pyiceberg writer killed with SIGKILL after writing its data
file and manifests and before its commit, and a planted unreferenced file. References are computed
without the code under test: files on disk listed with ``Path.rglob``, the files each snapshot needs
read with pyiceberg's ``inspect`` tables through a catalog of the test's own, rows read with
``scan(snapshot_id=...)``, reproduction by ``lakewrap reproduce`` (which compares with the table).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

import lakewrap
from lakehouse import at, partition
from lakeproject import cli
from lakewrap.errors import UnsupportedError
from lakewrap.execute.iceberg import IcebergLake
from lakewrap.maintain import maintain
from servers import moto_s3  # noqa: F401  (fixture)
from test_iceberg_catalogs import Kind, actual_tables, make_project, run, stack  # noqa: F401  (fixture)
from test_provenance import PARTITIONED, V3, ev
from test_provenance_iceberg import ICE_WHOLE, IceHistory, rows, state, table

TABLES = ["raw.events", "m.full", "m.di", "m.mrg", "m.app", "m.scd", "m.scd_check", "m.joined", "m.dyn"]

CONFIG = """\
[lake]
substrate = "iceberg"

[maintain]
retain_days = 0
keep_last = 1
protect = "{protect}"
orphan_min_age_minutes = 60
"""

KILLED_WRITER = """\
import sys
from pathlib import Path
import pyarrow as pa
from lakewrap.execute.iceberg import IcebergLake
table = IcebergLake.open(Path(sys.argv[1])).load("raw.events")
tx = table.transaction()
tx.append(table.scan(limit=1).to_arrow())  # writes the data file, its manifest and manifest list
print("written", flush=True)
sys.stdin.read()  # wait to be killed, before commit_transaction()
"""


@pytest.fixture
def history(tmp_path: Path) -> IceHistory:
    h = IceHistory(tmp_path / "proj")
    h.build()
    return h


def configure(root: Path, protect: str) -> None:
    (root / "lakewrap.toml").write_text(CONFIG.format(protect=protect))


def disk(root: Path) -> set[str]:
    """Every file of the warehouse, as an absolute path."""
    return {str(p) for p in (root / ".lakewrap" / "warehouse").rglob("*") if p.is_file()}


def local(location: str) -> str:
    return location.removeprefix("file://")


def needed(root: Path) -> set[str]:
    """What the remaining snapshots need: current metadata, manifest lists, manifests, live files."""
    out = set()
    for name in TABLES:
        t = table(root, name)
        out.add(local(t.metadata_location))
        for snap in t.metadata.snapshots:
            out.add(local(snap.manifest_list))
            out |= {local(m.manifest_path) for m in snap.manifests(t.io)}
            out |= {local(p) for p in t.inspect.files(snapshot_id=snap.snapshot_id)["file_path"].to_pylist()}
    return out


def referenced(root: Path) -> set[str]:
    """:func:`needed` plus the metadata log: everything the catalog can reach."""
    out = needed(root)
    for name in TABLES:
        out |= {local(e.metadata_file) for e in table(root, name).metadata.metadata_log}
    return out


def records(root: Path) -> list[tuple[str, int, dict[str, str]]]:
    """(table, snapshot id, summary) of every snapshot a lakewrap commit added."""
    out = []
    for name in TABLES:
        for snap in table(root, name).metadata.snapshots:
            props = dict(snap.summary.additional_properties)
            if "lakewrap.commit_id" in props:
                out.append((name, snap.snapshot_id, props))
    return out


def latest_records(root: Path) -> list[tuple[str, int, dict[str, str]]]:
    """The latest record of each (target, partition): what ``protect = "latest"`` retains."""
    last: dict[tuple[str, str], tuple[str, int, dict[str, str]]] = {}
    for rec in sorted(records(root), key=lambda r: table(root, r[0]).metadata.snapshot_by_id(r[1]).timestamp_ms):
        last[(rec[0], rec[2]["lakewrap.partition"])] = rec
    return list(last.values())


def referenced_snapshots(root: Path, latest_only: bool) -> dict[tuple[str, int], str]:
    """The (table, snapshot) each retained record reads or wrote, with what it is to the record."""
    recs = records(root)
    if latest_only:
        commits = {p["lakewrap.commit_id"] for _, _, p in latest_records(root)}
        recs = [r for r in recs if r[2]["lakewrap.commit_id"] in commits]
    out: dict[tuple[str, int], str] = {}
    for name, sid, props in recs:
        out[(name, sid)] = "own"
        if props["lakewrap.base_snapshot"]:
            out[(name, int(props["lakewrap.base_snapshot"]))] = "base"
        for upstream, pin in json.loads(props["lakewrap.pins"]).items():
            if pin is not None:
                out[(upstream, int(pin))] = "pin"
        if props.get("lakewrap.restored_from"):
            out[(name, int(json.loads(props["lakewrap.restored_from"])["snapshot"]))] = "restored"
    return out


def contents(root: Path, snapshots: dict[tuple[str, int], str]) -> dict[tuple[str, int], list[Any]]:
    return {(name, sid): rows(root, name, sid) for name, sid in snapshots}


def current_files(root: Path, name: str) -> int:
    return len(table(root, name).inspect.files())


def kill_writer(root: Path) -> set[str]:
    """The files a pyiceberg writer killed before its commit left (found by listing, before and after)."""
    before = disk(root)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "written"
    proc.kill()
    proc.wait()
    left = disk(root) - before
    assert any(p.endswith(".parquet") for p in left) and any(p.endswith(".avro") for p in left), left
    return left


def later() -> datetime:
    return datetime.now(timezone.utc) + timedelta(hours=2)


def test_dry_run_changes_nothing_then_maintain_frees_files_and_keeps_retained_runs(history: IceHistory) -> None:
    root = history.house.root
    # the latest record of m.di's partition 1 is a restore to a superseded build: that build's
    # snapshot must outlive the expiry of superseded builds
    restored = lakewrap.Project(root).restore("m.di", partition=partition(1), to_run=history.runs[1][0])
    configure(root, "latest")
    orphans = kill_writer(root)
    planted = Path(local(table(root, "m.app").location())) / "data" / "planted.parquet"
    planted.write_bytes(b"left by nobody")
    orphans.add(str(planted))
    assert disk(root) - referenced(root) == orphans  # the reference agrees on what is orphaned
    keep = referenced_snapshots(root, latest_only=True)
    retained = [(p["lakewrap.run_id"], name, p["lakewrap.partition"] or None) for name, _, p in latest_records(root)]
    assert (restored.run_id, "m.di", partition(1)) in retained and "restored" in keep.values()
    before_rows = contents(root, keep)
    before = state(root)
    files_before = disk(root)
    records_before = records(root)

    # a live writer's files are as unknown as a killed one's: younger than 60 minutes, they stay
    fresh = maintain(root, dry_run=True)
    assert fresh.orphans_removed == [] and state(root) == before
    dry = maintain(root, dry_run=True, now=later())
    assert state(root) == before, "the dry run wrote to the lake"
    assert {str(root / p) for p in dry.orphans_removed} == orphans
    assert dry.snapshots_expired and dry.old_files_removed

    done = maintain(root, now=later())
    assert done.snapshots_expired == dry.snapshots_expired
    assert done.orphans_removed == dry.orphans_removed
    # the compaction commits make the metadata files before them previous ones listing expired snapshots
    assert set(dry.old_files_removed) <= set(done.old_files_removed)
    extra = set(done.old_files_removed) - set(dry.old_files_removed)
    assert all(p.endswith(".metadata.json") for p in extra), extra

    files_after = disk(root)
    assert not files_after - referenced(root), "an orphan remains"
    assert needed(root) <= files_after, "a file a remaining snapshot needs was deleted"
    assert len(files_after) < len(files_before) - len(orphans)
    assert {str(root / p) for p in dry.old_files_removed} <= files_before - files_after
    assert not {str(root / p) for p in done.old_files_removed} & files_after
    # no snapshot a retained record references was expired, and each reads the same rows
    remaining = {(n, s.snapshot_id) for n in TABLES for s in table(root, n).metadata.snapshots}
    assert set(keep) <= remaining
    assert contents(root, keep) == before_rows
    assert not {sid for _, sid in keep} & set(done.snapshots_expired)
    # every retained materialization reproduces; superseded builds lost their snapshots
    for run_id, target, part in retained:
        report = lakewrap.Project(root).reproduce(run_id, model=target, partition=part)
        assert len(report.results) == 1 and report.results[0].status == "MATCH", (run_id, target, part, report)
    assert len(records(root)) < len(records_before)


def test_protect_all_keeps_every_run_and_compaction_changes_no_row(history: IceHistory) -> None:
    root = history.house.root
    configure(root, "all")
    keep = referenced_snapshots(root, latest_only=False)
    before_rows = contents(root, keep)
    current = {n: rows(root, n) for n in TABLES}
    files = {n: current_files(root, n) for n in TABLES}
    runs = {n: len(lakewrap.Project(root).history(n)) for n in TABLES if n != "raw.events"}
    source_snapshots = {s.snapshot_id for s in table(root, "raw.events").metadata.snapshots}

    code, out, err = cli("maintain", "--dry-run", "--project", str(root))
    assert code == 0, err
    assert "would expire" in out and "compaction (dry run" in out
    report = lakewrap.Project(root).maintain()
    compacted = {t.table: t for t in report.tables if t.merged}
    assert {"m.app", "m.scd", "m.scd_check"} <= set(compacted)  # small files of appends and SCD2 versions
    for name, entry in compacted.items():
        assert entry.data_files_before == files[name] and entry.data_files_after == current_files(root, name)
        assert current_files(root, name) < files[name]
        snap = table(root, name).current_snapshot()
        props = snap.summary.additional_properties
        assert props.get("lakewrap.maintain") == "compact" and "lakewrap.commit_id" not in props
    assert {n: rows(root, n) for n in TABLES} == current, "compaction changed a table's rows"
    # only snapshots no record references went: the source's own (unpinned) snapshots
    assert report.snapshots_expired and set(report.snapshots_expired) <= source_snapshots
    assert not {sid for _, sid in keep} & set(report.snapshots_expired)
    assert contents(root, keep) == before_rows
    assert not disk(root) - referenced(root) and needed(root) <= disk(root)
    compaction = {n: table(root, n).current_snapshot().snapshot_id for n in compacted}
    # the compaction commit is not a materialization; every run still reproduces
    assert {n: len(lakewrap.Project(root).history(n)) for n in runs} == runs
    for run_id, _ in history.runs:
        assert lakewrap.Project(root).reproduce(run_id).ok, run_id

    # later runs start from the compaction's snapshot; they and their reproduction work as before
    history.source([*V3, ev(7, "c", 70, 1, 11, 23)])
    run_p = history.run(PARTITIONED, at(6), partition(1))
    run_w = history.run(ICE_WHOLE, at(6))
    for run_id in (run_p, run_w):
        report_r = lakewrap.Project(root).reproduce(run_id)
        assert report_r.ok and all(r.status == "MATCH" for r in report_r.results), run_id
    props = table(root, "m.app").current_snapshot().summary.additional_properties
    assert int(props["lakewrap.base_snapshot"]) == compaction["m.app"]
    again = lakewrap.Project(root).maintain()
    assert again.orphans_removed == [] and not disk(root) - referenced(root)


def test_sql_write_path_is_refused_with_a_hint(tmp_path: Path) -> None:
    (tmp_path / "lakewrap.toml").write_text('[lake]\nsubstrate = "iceberg"\ncatalog = "rest"\nwrite_path = "sql"\n'
                                            '[lake.rest]\nuri = "http://127.0.0.1:9"\n')
    with pytest.raises(UnsupportedError) as err:
        lakewrap.Project(tmp_path).maintain(dry_run=True)
    assert "write_path" in str(err.value) and "expire_snapshots" in (err.value.hint or "")


def test_compaction_loses_no_concurrent_commit(history: IceHistory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer commits to the table between the compaction's planning and its commit."""
    from lakewrap.substrates.iceberg import maintain as maintain_iceberg

    root = history.house.root
    configure(root, "all")
    real = maintain_iceberg.compact
    racer: list[Any] = []

    def racing(name: str, handle: Any, dry_run: bool) -> Any:
        if name == "m.app" and racer:
            racer.pop()(table(root, name))  # through a catalog of its own, after `handle` was loaded
        return real(name, handle, dry_run)

    monkeypatch.setattr(maintain_iceberg, "compact", racing)
    extra = table(root, "m.app").scan(limit=1).to_arrow()
    added = [tuple(sorted(r.items())) for r in extra.to_pylist()]
    # a rewrite that removes the very files being merged; then (after an append that gives one
    # partition two files again) an append into the partition being merged, which serializable
    # isolation also counts as a conflict
    races = [(lambda t: t.overwrite(t.scan().to_arrow()), lambda old: old),
             (lambda t: t.append(extra), lambda old: sorted([*old, *added]))]
    for i, (race, expect) in enumerate(races):
        if i:
            table(root, "m.app").append(extra)
        racer.append(race)
        before = rows(root, "m.app")
        report = lakewrap.Project(root).maintain()
        assert any(n.startswith("compaction of m.app skipped: another writer") for n in report.notes), report.notes
        assert rows(root, "m.app") == expect(before), "a concurrent commit was lost"
        assert "lakewrap.maintain" not in table(root, "m.app").current_snapshot().summary.additional_properties
    files = current_files(root, "m.app")
    report = lakewrap.Project(root).maintain()  # no race: the next maintain merges them
    (entry,) = [t for t in report.tables if t.table == "m.app"]
    assert not report.notes and entry.merged == 3 and entry.data_files_after == files - 2


@pytest.mark.slow  # moto's server and two project runs: about 25 s per catalog
@pytest.mark.parametrize("kind", [Kind("sql-s3", "sql", s3=True), Kind("rest-s3", "rest", s3=True)], ids=str)
def test_maintain_on_an_s3_warehouse(kind: Kind, tmp_path: Path, request: pytest.FixtureRequest,
                                     monkeypatch: pytest.MonkeyPatch, stack: Any) -> None:  # noqa: F811
    """Listing, expiry and deletion through pyiceberg's S3 FileIO (moto), on a SQL and a REST catalog."""
    from lakeproject import write_seeds

    proj = make_project(tmp_path, kind, request, monkeypatch, stack)
    assert proj.s3 is not None and proj.bucket is not None
    s3, bucket = proj.s3, proj.bucket
    run(proj, "seed")
    run(proj, "run", "--start", "2024-01-01", "--end", "2024-01-03", "--now", "2024-01-05T00:00:00Z")
    write_seeds(proj.root, 2)
    run(proj, "seed")
    run(proj, "run", "--start", "2024-01-01", "--end", "2024-01-02", "--now", "2024-01-06T00:00:00Z")
    toml = proj.root / "lakewrap.toml"
    toml.write_text(toml.read_text() + "\n[maintain]\nretain_days = 0\nkeep_last = 1\nprotect = \"latest\"\n")
    lake = IcebergLake.open(proj.root)
    location = lake.load("sales.orders").location()
    planted = location + "/data/planted.parquet"
    s3.client().put_object(Bucket=bucket, Key=planted.removeprefix(f"s3://{bucket}/"), Body=b"left by nobody")
    tables = actual_tables(proj.root)
    keys = set(s3.keys(bucket))

    dry = maintain(proj.root, dry_run=True, now=later())
    assert set(s3.keys(bucket)) == keys, "the dry run wrote to the bucket"
    assert dry.orphans_removed == [planted] and dry.snapshots_expired
    done = maintain(proj.root, now=later())
    after = {f"s3://{bucket}/{k}" for k in s3.keys(bucket)}
    assert done.orphans_removed == [planted] and planted not in after
    assert done.snapshots_expired == dry.snapshots_expired
    assert done.old_files_removed and not set(done.old_files_removed) & after
    assert len(after) < len(keys)
    assert actual_tables(proj.root) == tables
    for name in lake.tables():  # every file a remaining snapshot needs is still there
        t = lake.load(name)
        for snap in t.metadata.snapshots:
            files = {snap.manifest_list, *(m.manifest_path for m in snap.manifests(t.io)),
                     *t.inspect.files(snapshot_id=snap.snapshot_id)["file_path"].to_pylist()}
            assert files <= after, (name, files - after)

