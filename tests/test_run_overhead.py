"""What a `lakewrap run` does besides the model's own SQL: imports, and state written once per plan.

A one-model run should cost little more than a hand-written script doing the same work
(benchmarks/strategies.py measures it); these tests pin down the mechanisms that keep it so, on a
real embedded DuckLake, without timing anything.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lakewrap.config import CONFIG_CACHE, load_config
from lakewrap.errors import ConfigError
from lakewrap.execute.lake import Lake
from lakewrap.runner import run_project, seed_project

SHOP = Path(__file__).resolve().parents[1] / "examples" / "shop"


def shop_copy(tmp_path: Path) -> Path:
    root = tmp_path / "shop"
    shutil.copytree(SHOP, root, ignore=shutil.ignore_patterns(".lakewrap", "target"))
    return root


def lake_rows(root: Path, sql: str) -> list[tuple[object, ...]]:
    lake = Lake.open(root, read_only=True)
    con = lake.connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        lake.close(con)


def test_a_warm_run_imports_neither_sqlglot_nor_rich_nor_pydantic(tmp_path: Path) -> None:
    """The second run takes its specs, statements and config from the cache and prints plain text into a
    pipe; on a DuckDB-file catalog it has no use for Python's sqlite3 either."""
    root = shop_copy(tmp_path)
    (root / "lakewrap.toml").write_text('[lake]\nsubstrate = "ducklake"\n'  # the embedded default, spelled out
                                        '\n[security]\nscripts = ["models/marts"]\n')  # its Python model may run
    seed_project(root)
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), file=sys.stderr))  # runs last\n"
        "from lakewrap.cli import main\n"
        "try:\n"
        f"    main(['run', 'sales.orders', '--project', {str(root)!r}, '--partition', '2024-01-02'])\n"
        "except SystemExit as e:\n"
        "    assert e.code in (0, None), e.code\n"
        "loaded = sorted({m.split('.')[0] for m in sys.modules} & {'sqlglot', 'rich', 'pydantic', 'sqlite3'})\n"
        "print('LOADED', loaded, file=sys.stderr)\n"
    )
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "LOADED ['pydantic', 'sqlglot']" in first.stderr  # a cold cache parses (validates) and compiles
    second = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "LOADED []" in second.stderr, second.stderr
    # At exit the CLI freezes what it allocated, so the interpreter's last collections skip it.
    frozen = int(second.stderr.split("FROZEN ")[1].split()[0])
    assert frozen > 10_000, second.stderr
    lines = second.stdout.splitlines()
    assert lines[0].startswith("run ") and lines[1].split() == [
        "model", "partition", "status", "inserted", "updated", "deleted", "snapshot", "seconds"]
    assert lines[3].split()[:3] == ["sales.orders", "2024-01-02", "success"]


def test_the_validated_config_is_kept_by_the_files_hash(tmp_path: Path) -> None:
    """A warm run reads ``lakewrap.toml``'s validated form from the cache; any edit is validated again."""
    root = tmp_path / "p"
    root.mkdir()
    toml = root / "lakewrap.toml"
    toml.write_text('[lake]\ndata_inlining_row_limit = 7\n\n[run]\nretries = 3\n')
    first = load_config(root)
    assert (first.lake.data_inlining_row_limit, first.run.retries) == (7, 3)
    cached = json.loads((root / CONFIG_CACHE).read_text())
    assert cached["sha256"] == hashlib.sha256(toml.read_bytes()).hexdigest()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from lakewrap.config import load_config\n"
        f"c = load_config(Path({str(root)!r}))\n"
        "print(c.lake.data_inlining_row_limit, c.run.retries, 'pydantic' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["7", "3", "False"]

    # An edit is a new hash: validated, with its located error, whatever the cache holds.
    toml.write_text('[lake]\ndata_inlining_row_limit = 7\n\n[run]\nretries = -1\n')
    with pytest.raises(ConfigError) as bad:
        load_config(root)
    assert bad.value.location is not None and bad.value.location.line == 5
    assert "greater than or equal to 0" in bad.value.message

    # A damaged cache is not trusted: the file is validated again.
    toml.write_text('[run]\nretries = 4\n')
    (root / CONFIG_CACHE).write_text('{"sha256": "' + hashlib.sha256(toml.read_bytes()).hexdigest() + '", "key": 1')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["None", "4", "True"]


def test_compiled_sql_is_stored_once_per_plan_and_the_fence_names_it(tmp_path: Path) -> None:
    root = shop_copy(tmp_path)
    seed_project(root)
    seeded = set(lake_rows(root, "SELECT sql_sha256 FROM lakewrap.compiled_sql"))  # the seeds' plans
    report = run_project(root, ["sales.orders"], start="2024-01-01", end="2024-01-03")
    assert [r.status for r in report.results] == ["success"] * 3
    (sha,) = {r.sql_sha256 for r in report.results}
    stored = lake_rows(root, "SELECT sql_sha256 FROM lakewrap.compiled_sql")
    assert sorted(stored) == sorted(seeded | {(sha,)}) and len(stored) == len(seeded) + 1
    assert lake_rows(root, 'SELECT sql_sha256 FROM lakewrap."fence:sales.orders"') == [(sha,)]
    # Only the first materialization of this plan wrote its statements.
    logs = sorted((root / "target" / "run" / report.run_id).glob("sales.orders__*.sql"))
    writes = ["compiled_sql" in log.read_text() for log in logs]
    assert writes == [True, False, False]

    # A changed model is a new plan: stored once more, and the fence moves on to it.
    model = root / "models" / "sales" / "orders.sql"
    model.write_text(model.read_text().replace("status,", "trim(status) AS status,", 1))
    again = run_project(root, ["sales.orders"], partition="2024-01-02")
    new_sha = again.results[0].sql_sha256
    assert again.results[0].status == "success" and new_sha != sha
    stored = lake_rows(root, "SELECT sql_sha256 FROM lakewrap.compiled_sql")
    assert sorted(stored) == sorted(seeded | {(sha,), (new_sha,)}) and len(stored) == len(seeded) + 2
    assert lake_rows(root, 'SELECT sql_sha256 FROM lakewrap."fence:sales.orders"') == [(new_sha,)]
    recorded = lake_rows(root, "SELECT DISTINCT m.sql_sha256 FROM lakewrap.materializations m "
                               "ANTI JOIN lakewrap.compiled_sql c USING (sql_sha256)")
    assert recorded == []  # every materialization's statements can be read back


def test_a_fence_from_before_the_hash_column_is_upgraded(tmp_path: Path) -> None:
    """lakewrap 0.1.0 made fences without ``sql_sha256``; the next materialization adds it."""
    root = shop_copy(tmp_path)
    seed_project(root)
    assert run_project(root, ["sales.orders"], partition="2024-01-01").ok
    lake = Lake.open(root)
    con = lake.connect()
    try:
        con.execute('ALTER TABLE lakewrap."fence:sales.orders" DROP COLUMN sql_sha256')
    finally:
        lake.close(con)
    report = run_project(root, ["sales.orders"], partition="2024-01-02")
    assert report.ok, report.results[0].error
    sha = report.results[0].sql_sha256
    assert lake_rows(root, 'SELECT sql_sha256 FROM lakewrap."fence:sales.orders"') == [(sha,)]
    # the statement log shows the upgrade, inside the materialization's transaction
    log = next((root / "target" / "run" / report.run_id).glob("sales.orders__*.sql")).read_text()
    assert "ADD COLUMN IF NOT EXISTS" in log and log.index("BEGIN") < log.index("ADD COLUMN")


def test_a_group_commit_stores_each_plan_once_and_upgrades_an_old_fence(tmp_path: Path) -> None:
    """Group commit reads its members' fences together (``Executor.read_fences``): a plan is stored
    once, a new plan once more, a fence lacking its hash column (lakewrap 0.1.0) is upgraded inside
    the group, and every fence names its model's last plan."""
    root = tmp_path / "p"
    (root / "models" / "m").mkdir(parents=True)
    (root / "lakewrap.toml").write_text("")
    names = [f"t{i}" for i in range(4)]
    for i, name in enumerate(names):
        (root / "models" / "m" / f"{name}.sql").write_text(f"SELECT range AS id, range * {i} AS v FROM range(10)\n")

    def run_all() -> dict[str, str]:
        report = run_project(root)
        assert report.ok and {r.group for r in report.results} != {None}, report.to_dict()
        return {r.target: r.sql_sha256 for r in report.results}

    def stores(run_id: str) -> list[bool]:
        logs = sorted((root / "target" / "run" / run_id).glob("m.*.sql"))
        return ["compiled_sql" in log.read_text() for log in logs]

    first = run_all()
    again = run_project(root)
    assert {r.target: r.sql_sha256 for r in again.results} == first and stores(again.run_id) == [False] * 4
    model = root / "models" / "m" / "t1.sql"
    model.write_text(model.read_text().replace("range(10)", "range(20)"))
    lake = Lake.open(root)
    con = lake.connect()
    try:
        con.execute('ALTER TABLE lakewrap."fence:m.t2" DROP COLUMN sql_sha256')
    finally:
        lake.close(con)
    changed = run_project(root)
    assert changed.ok, changed.to_dict()
    now = {r.target: r.sql_sha256 for r in changed.results}
    assert now["m.t1"] != first["m.t1"] and {t: s for t, s in now.items() if t != "m.t1"} == {
        t: s for t, s in first.items() if t != "m.t1"}
    assert stores(changed.run_id) == [False, True, True, False]  # the new plan; the upgraded fence's
    stored = lake_rows(root, "SELECT sql_sha256 FROM lakewrap.compiled_sql")
    assert len(stored) == len(set(stored)) and set(now.values()) | {first["m.t1"]} <= {s for (s,) in stored}
    for target, sha in now.items():
        assert lake_rows(root, f'SELECT sql_sha256 FROM lakewrap."fence:{target}"') == [(sha,)]
