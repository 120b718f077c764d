"""Hooks on real DuckLakes (and one embedded Iceberg lake), run as real child processes.

Every hook here writes what it received (the JSON on stdin, its ``LAKEWRAP_*`` environment, which
credential variables it could see) into files of the project; the tests read those files and
compare them with the run's report, the lake as an :class:`~lakeproject.Inspector` reads it
without lakewrap, and row counts plain DuckDB computes from the same source rows.
"""

from __future__ import annotations

import json
import os
import stat
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from helpers import run as cli
from lakehouse import UTC, Lakehouse
from lakeproject import Inspector
from lakewrap.runner import run_project

NOW = datetime(2024, 6, 1, tzinfo=UTC)
ORDERS = {"order_id": "INTEGER", "amount": "INTEGER", "created_at": "TIMESTAMPTZ"}
PATH = "models/sales/orders.sql"
SECRET = "hook-canary-Secret-9f3b"
TOML = '[security]\nscripts = ["hooks"]\n'

# A Python hook: records its context, its LAKEWRAP_* environment and whether a credential variable
# reached it; prints a line holding the secret (read from a file, so only redaction can hide it).
RECORD = """\
import json, os, pathlib
def main(context):
    out = pathlib.Path("out")
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k.startswith("LAKEWRAP_")}
    seen = {k: k in os.environ for k in ("AWS_SECRET_ACCESS_KEY", "PGPASSWORD")}
    name = context["event"] + ("-" + context["partition"]["value"] if context.get("partition") else "")
    with open(out / (name + ".jsonl"), "a") as f:
        f.write(json.dumps({"context": context, "env": env, "seen": seen, "cwd": os.getcwd()}) + "\\n")
    print("recorded", name, "token", pathlib.Path("token.txt").read_text().strip())
"""
# An executable hook (a shell script): its stdin and environment, as files.
RECORD_SH = """\
#!/bin/sh
mkdir -p out
cat > "out/sh-$LAKEWRAP_EVENT-$LAKEWRAP_PARTITION_VALUE.json"
env | grep '^LAKEWRAP_' | sort > "out/sh-$LAKEWRAP_EVENT-$LAKEWRAP_PARTITION_VALUE.env"
echo "shell hook done"
"""
FAIL = "import sys\ndef main(context):\n    print('about to fail')\n    sys.exit(3)\n"
# A hook that starts a grandchild, writes its pid, and hangs: the timeout must kill both.
HANG = """\
import subprocess, sys, time, pathlib
def main(context):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pathlib.Path("out").mkdir(exist_ok=True)
    pathlib.Path("out/grandchild.pid").write_text(str(child.pid))
    time.sleep(120)
"""


def model(*hooks: str, extra: str = "") -> str:
    return "\n".join(["-- materialized incremental", "-- partitioned daily key=created_at", *hooks,
                      *([extra] if extra else []),
                      "SELECT order_id, amount, created_at FROM raw.orders",
                      "WHERE created_at >= $partition_start AND created_at < $partition_end", ""])


def rows(*days: int) -> list[dict[str, Any]]:
    out = []
    for day in days:
        for i in range(day):  # day d has d orders
            out.append({"order_id": day * 100 + i, "amount": 10 * i - 5,
                        "created_at": datetime(2024, 1, day, tzinfo=UTC) + timedelta(hours=i)})
    return out


def project(root: Path, text: str, *, toml: str = TOML, days: tuple[int, ...] = (1, 2, 3)) -> Lakehouse:
    hooks = root / "hooks"
    hooks.mkdir(parents=True)
    (hooks / "record.py").write_text(RECORD)
    (hooks / "record.sh").write_text(RECORD_SH)
    (hooks / "record.sh").chmod((hooks / "record.sh").stat().st_mode | stat.S_IXUSR)
    (hooks / "fail.py").write_text(FAIL)
    (hooks / "hang.py").write_text(HANG)
    (root / "token.txt").write_text(SECRET + "\n")
    (root / "lakewrap.toml").write_text(toml)
    lake = Lakehouse(root, {"sales/orders.sql": text})
    lake.sql(tables={"raw.orders": rows(*days)}, types={"raw.orders": ORDERS})
    return lake


def records(root: Path, name: str) -> list[dict[str, Any]]:
    path = root / "out" / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def reference_count(day: int) -> int:
    """The rows of one day, computed by plain DuckDB from the same source rows."""
    con = duckdb.connect()
    try:
        con.execute("CREATE TABLE o (order_id INTEGER, amount INTEGER, created_at TIMESTAMPTZ)")
        con.executemany("INSERT INTO o VALUES (?, ?, ?)", [(r["order_id"], r["amount"], r["created_at"])
                                                           for r in rows(1, 2, 3)])
        return int(con.execute("SELECT count(*) FROM o WHERE created_at >= ? AND created_at < ?",
                               [datetime(2024, 1, day, tzinfo=UTC),
                                datetime(2024, 1, day + 1, tzinfo=UTC)]).fetchone()[0])
    finally:
        con.close()


def log_lines(root: Path) -> list[tuple[str, str]]:
    import lakewrap

    table = lakewrap.Project(root).query("SELECT level, message FROM lakewrap_log ORDER BY logged_at")
    return list(zip(table.column("level").to_pylist(), table.column("message").to_pylist(), strict=True))


def table_rows(lake: Lakehouse) -> list[tuple[Any, ...]]:
    return lake.rows("SELECT order_id, amount FROM sales.orders ORDER BY 1")


def test_hooks_receive_the_context_on_stdin_and_in_the_environment(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("PGPASSWORD", SECRET)
    lake = project(tmp_path, model("-- pre_run hooks/record.py", "-- post_run hooks/record.py",
                                   "-- post_run hooks/record.sh"),
                   toml=TOML + '[hooks]\npass_env = ["PGPASSWORD"]\n')
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "success", result.error
    (pre,) = records(tmp_path, "pre_run-2024-01-02")
    (post,) = records(tmp_path, "post_run-2024-01-02")
    for got, status in ((pre, "running"), (post, "success")):
        ctx = got["context"]
        assert (ctx["run_id"], ctx["model"], ctx["target"], ctx["status"]) == (report.run_id, PATH, "sales.orders",
                                                                               status)
        assert ctx["partition"] == {"value": "2024-01-02", "start": "2024-01-02T00:00:00+00:00",
                                    "end": "2024-01-03T00:00:00+00:00"}
        env = got["env"]
        assert (env["LAKEWRAP_RUN_ID"], env["LAKEWRAP_TARGET"], env["LAKEWRAP_STATUS"]) == (report.run_id,
                                                                                           "sales.orders", status)
        assert (env["LAKEWRAP_PARTITION_VALUE"], env["LAKEWRAP_PARTITION_START"], env["LAKEWRAP_PARTITION_END"]) == (
            "2024-01-02", "2024-01-02T00:00:00+00:00", "2024-01-03T00:00:00+00:00")
        # lakewrap's credential variables do not reach a hook unless [hooks] pass_env names them
        assert got["seen"] == {"AWS_SECRET_ACCESS_KEY": False, "PGPASSWORD": True}
        assert Path(got["cwd"]).resolve() == tmp_path.resolve()
    assert pre["context"]["snapshot_id"] is None and pre["context"]["rows_inserted"] == 0
    snapshots, _ = Inspector().state(tmp_path)
    assert post["context"]["snapshot_id"] == result.snapshot_id == snapshots[-1]
    assert post["context"]["rows_inserted"] == result.rows_inserted == reference_count(2) == 2
    assert post["env"]["LAKEWRAP_SNAPSHOT_ID"] == str(result.snapshot_id)
    # the executable got the same JSON on stdin and the same variables
    sh = json.loads((tmp_path / "out" / "sh-post_run-2024-01-02.json").read_text())
    assert sh["run_id"] == report.run_id and sh["rows_inserted"] == 2 and sh["event"] == "post_run"
    sh_env = dict(line.split("=", 1) for line in
                  (tmp_path / "out" / "sh-post_run-2024-01-02.env").read_text().splitlines())
    assert sh_env["LAKEWRAP_PARTITION_START"] == "2024-01-02T00:00:00+00:00"
    # the output went to the run log and the report, redacted
    assert [h["event"] for h in result.hooks] == ["pre_run", "post_run", "post_run"]
    assert all(h["status"] == "ok" for h in result.hooks)
    shown = json.dumps(report.to_dict()) + repr(log_lines(tmp_path))
    assert "recorded post_run-2024-01-02 token ***" in shown and SECRET not in shown
    assert ("info", "post_run hooks/record.sh: shell hook done") in log_lines(tmp_path)
    assert table_rows(lake) == [(200, -5), (201, 5)]


def test_a_failing_pre_run_writes_nothing_and_runs_on_failure(tmp_path: Path, inspector: Inspector) -> None:
    project(tmp_path, model("-- pre_run hooks/fail.py", "-- on_failure hooks/record.py",
                            "-- post_run hooks/record.py"))
    before = inspector.state(tmp_path)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "failed" and result.error_class == "HookError"
    assert result.error_location == {"path": PATH, "line": 3, "column": 12}, result.error
    assert "-- pre_run hooks/fail.py\n" in (result.error or "")  # the line, with a caret under the path
    assert "pre_run hook hooks/fail.py failed (exit 3): about to fail" in (result.error or "")
    assert inspector.state(tmp_path) == before, "a failing pre_run must write nothing"
    (failed,) = records(tmp_path, "on_failure-2024-01-02")
    assert failed["context"]["status"] == "failed" and "about to fail" in failed["context"]["error"]
    assert failed["env"]["LAKEWRAP_STATUS"] == "failed"
    assert records(tmp_path, "post_run-2024-01-02") == []
    assert [(h["event"], h["status"], h["exit_code"]) for h in result.hooks] == [("pre_run", "failed", 3),
                                                                                 ("on_failure", "ok", 0)]


def test_a_failing_post_run_keeps_the_commit_and_is_reported(tmp_path: Path, inspector: Inspector) -> None:
    lake = project(tmp_path, model("-- post_run hooks/fail.py"))
    before, _ = inspector.state(tmp_path)
    code, out, err = cli("run", "--project", str(tmp_path), "--partition", "2024-01-03", "--now", NOW.isoformat(),
                         "--format", "json")
    assert code == 0, out + err
    (result,) = json.loads(out)["results"]
    assert result["status"] == "success"
    assert [(h["event"], h["status"]) for h in result["hooks"]] == [("post_run", "failed")]
    assert any("post_run hook hooks/fail.py failed (exit 3)" in w and "the commit stands" in w
               for w in result["warnings"]), result["warnings"]
    after, _ = inspector.state(tmp_path)
    assert after[:-1] == before and result["snapshot_id"] == after[-1]
    assert table_rows(lake) == sorted((r["order_id"], r["amount"]) for r in rows(3))
    assert len(table_rows(lake)) == reference_count(3)
    assert any(level == "warning" and "post_run hook hooks/fail.py failed" in m for level, m in log_lines(tmp_path))
    # the text output prints it too
    code, out, err = cli("run", "--project", str(tmp_path), "--partition", "2024-01-03", "--now", NOW.isoformat())
    assert code == 0 and "warning:" in out and "post_run hook hooks/fail.py failed" in out, out + err


def test_a_failing_on_failure_does_not_hide_the_original_error(tmp_path: Path, inspector: Inspector) -> None:
    # amount >= 0 fails on day 2 (order 200 has amount -5): the write is rolled back
    project(tmp_path, model("-- on_failure hooks/fail.py", "-- on_failure hooks/record.py",
                            extra='-- test expression "amount >= 0"'))
    before = inspector.state(tmp_path)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "failed" and result.error_class == "DataTestFailure"
    assert "a test failed" in (result.error or "") and "expression amount >= 0" in (result.error or "")
    assert any("on_failure hook hooks/fail.py failed (exit 3)" in w for w in result.warnings), result.warnings
    assert inspector.state(tmp_path) == before
    # the hook after the failing one still ran, and saw the original error
    (seen,) = records(tmp_path, "on_failure-2024-01-02")
    assert "a test failed" in seen["context"]["error"] and seen["env"]["LAKEWRAP_ERROR"] == seen["context"]["error"]


def test_a_hanging_hook_is_killed_at_its_timeout(tmp_path: Path, inspector: Inspector) -> None:
    project(tmp_path, model("-- pre_run hooks/hang.py timeout=2"))
    before = inspector.state(tmp_path)
    started = time.monotonic()
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    took = time.monotonic() - started
    (result,) = report.results
    assert result.status == "failed" and "timed out after" in (result.error or "")
    (hook,) = result.hooks
    assert hook["status"] == "timeout" and 2 <= hook["seconds"] < 30, hook
    assert took < 60
    assert inspector.state(tmp_path) == before
    pid = int((tmp_path / "out" / "grandchild.pid").read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid), "the hook's own children are killed with it"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (killed, not yet reaped by its parent, which is gone) counts as dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_run_hooks_fire_once_per_run(tmp_path: Path) -> None:
    toml = TOML + '[hooks]\non_run_start = "hooks/record.py"\non_run_end = "hooks/record.py"\n' \
                  'on_failure = "hooks/record.py"\n'
    project(tmp_path, model(), toml=toml)
    report = run_project(tmp_path, start="2024-01-01", end="2024-01-03", now=NOW)
    assert report.ok and len(report.results) == 3
    (start,) = records(tmp_path, "on_run_start")
    (end,) = records(tmp_path, "on_run_end")
    assert records(tmp_path, "on_failure") == [], "on_failure fires only for a run that did not succeed"
    assert start["context"]["status"] == "running" and start["context"]["run_id"] == report.run_id
    ctx = end["context"]
    assert (ctx["status"], ctx["run_id"], ctx["command"], ctx["steps"]) == ("success", report.run_id, "run", 3)
    assert ctx["counts"]["success"] == 3
    assert ctx["rows_inserted"] == sum(r.rows_inserted for r in report.results) == sum(
        reference_count(d) for d in (1, 2, 3))
    assert end["env"]["LAKEWRAP_COMMAND"] == "run" and "LAKEWRAP_PARTITION_VALUE" not in end["env"]
    assert [h["event"] for h in report.to_dict()["hooks"]] == ["on_run_start", "on_run_end"]

    # a failing run: on_failure, then on_run_end, each once, with the failed step's error
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model(extra='-- test expression "amount >= 0"'))
    failed = run_project(tmp_path, start="2024-01-01", end="2024-01-03", now=NOW)
    assert not failed.ok
    (fail,) = records(tmp_path, "on_failure")
    assert fail["context"]["status"] == "failed" and "a test failed" in fail["context"]["error"]
    assert [r["context"]["status"] for r in records(tmp_path, "on_run_end")] == ["success", "failed"]
    assert len(records(tmp_path, "on_run_start")) == 2


def test_a_failing_on_run_start_runs_no_step(tmp_path: Path, inspector: Inspector) -> None:
    project(tmp_path, model(), toml=TOML + '[hooks]\non_run_start = "hooks/fail.py"\non_run_end = "hooks/record.py"\n')
    before = inspector.state(tmp_path)
    code, out, err = cli("run", "--project", str(tmp_path), "--start", "2024-01-01", "--end", "2024-01-02",
                         "--now", NOW.isoformat(), "--format", "json")
    assert code == 1, out + err
    doc = json.loads(out)
    assert [r["status"] for r in doc["results"]] == ["skipped", "skipped"]
    assert all("on_run_start hook failed" in r["error"] for r in doc["results"])
    assert any("on_run_start hook hooks/fail.py failed (exit 3)" in w for w in doc["warnings"]), doc["warnings"]
    assert inspector.state(tmp_path) == before
    (end,) = records(tmp_path, "on_run_end")
    assert end["context"]["status"] == "failed"


def test_bad_hook_paths_are_located_errors(tmp_path: Path, inspector: Inspector) -> None:
    lake = project(tmp_path, model("-- post_run hooks/recrod.py"))
    code, _, err = cli("compile", "--project", str(tmp_path), "--no-cache")
    assert code == 1
    assert f"{PATH}:3:13: `-- post_run`: no such file `hooks/recrod.py`" in err, err
    assert "did you mean `hooks/record.py`?" in err

    (tmp_path / "models" / "sales" / "orders.sql").write_text(model("-- pre_run hooks/record.py tiemout=3"))
    code, _, err = cli("compile", "--project", str(tmp_path), "--no-cache")
    assert code == 1 and f"{PATH}:3:" in err and "did you mean `timeout`?" in err, err

    (tmp_path / "hooks" / "plain.txt").write_text("not a hook\n")
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model("-- pre_run hooks/plain.txt"))
    code, _, err = cli("compile", "--project", str(tmp_path), "--no-cache")
    assert code == 1 and "neither a Python file (.py) nor executable" in err and "chmod +x" in err, err

    (tmp_path / "hooks" / "nomain.py").write_text("def mian(context):\n    pass\n")
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model("-- pre_run hooks/nomain.py"))
    code, _, err = cli("compile", "--project", str(tmp_path), "--no-cache")
    assert code == 1 and "defines no function `main`" in err and "did you mean `mian`?" in err, err

    # [hooks]: a missing file is an error on the key's line, before anything runs
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model())
    (tmp_path / "lakewrap.toml").write_text(TOML + '[hooks]\ntimeout = 5\non_run_end = "hooks/recod.py"\n')
    before = inspector.state(tmp_path)
    code, _, err = cli("run", "--project", str(tmp_path), "--partition", "2024-01-02", "--now", NOW.isoformat())
    assert code == 1 and "lakewrap.toml:5:" in err and "hooks.on_run_end: no such file `hooks/recod.py`" in err, err
    assert "did you mean `hooks/record.py`?" in err
    (tmp_path / "lakewrap.toml").write_text(TOML + '[hooks]\non_run_ned = "hooks/record.py"\n')
    code, _, err = cli("run", "--project", str(tmp_path), "--partition", "2024-01-02", "--now", NOW.isoformat())
    assert code == 1 and "lakewrap.toml:4:" in err and "unknown key `hooks.on_run_ned`" in err, err
    assert "did you mean `on_run_end`?" in err
    (tmp_path / "lakewrap.toml").write_text(TOML + '[hooks]\ntimeout = 0\n')
    code, _, err = cli("run", "--project", str(tmp_path), "--partition", "2024-01-02", "--now", NOW.isoformat())
    assert code == 1 and "lakewrap.toml:4:" in err and "hooks.timeout" in err, err
    assert inspector.state(tmp_path) == before
    (tmp_path / "lakewrap.toml").write_text(TOML)
    assert table_rows_or_none(lake) is None


def table_rows_or_none(lake: Lakehouse) -> list[tuple[Any, ...]] | None:
    try:
        return table_rows(lake)
    except duckdb.CatalogException:
        return None


def test_a_model_may_run_only_the_scripts_security_allows(tmp_path: Path, inspector: Inspector) -> None:
    """A model author's hook runs as the user: only from a folder lakewrap.toml's [security] scripts lists."""
    lake = project(tmp_path, model("-- pre_run hooks/record.py"), toml="")
    before = inspector.state(tmp_path)
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "failed"
    assert result.error_location == {"path": PATH, "line": 3, "column": 12}, result.error
    assert "not in a folder whose scripts models may run" in (result.error or "")
    assert 'scripts = [\\"hooks\\"]' in json.dumps(result.error) or 'scripts = ["hooks"]' in (result.error or "")
    assert not (tmp_path / "out").exists(), "the hook must not have run"
    assert inspector.state(tmp_path) == before
    assert table_rows_or_none(lake) is None


def test_pre_and_post_run_on_iceberg(tmp_path: Path) -> None:
    from icehouse import ICEBERG_TOML, IcebergLakehouse

    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "record.py").write_text(RECORD)
    (tmp_path / "hooks" / "fail.py").write_text(FAIL)
    (tmp_path / "token.txt").write_text(SECRET)
    lake = IcebergLakehouse(tmp_path, {"sales/orders.sql": model("-- pre_run hooks/record.py",
                                                                 "-- post_run hooks/record.py")},
                            toml=ICEBERG_TOML + TOML)
    lake.sql(tables={"raw.orders": rows(1, 2, 3)}, types={"raw.orders": ORDERS})
    report = lake.run(partition="2024-01-03", now=NOW)
    (result,) = report.results
    assert result.status == "success", result.error
    (post,) = records(tmp_path, "post_run-2024-01-03")
    assert post["context"]["rows_inserted"] == reference_count(3) == result.rows_inserted
    assert post["context"]["snapshot_id"] == result.snapshot_id is not None
    assert records(tmp_path, "pre_run-2024-01-03")[0]["context"]["status"] == "running"
    got = lake.read("sales.orders", lake.head)  # pyiceberg's scan at the lake's state after the run
    assert got is not None and sorted(r["order_id"] for r in got) == [300, 301, 302]

    # a failing pre_run: the Iceberg table keeps its snapshot
    (tmp_path / "models" / "sales" / "orders.sql").write_text(model("-- pre_run hooks/fail.py"))
    import lakewrap

    before = lakewrap.Project(tmp_path).query("SELECT count(*) AS n FROM sales.orders").column("n").to_pylist()
    failed = run_project(tmp_path, partition="2024-01-02", now=NOW)
    assert failed.results[0].status == "failed" and failed.results[0].error_class == "HookError"
    after = lakewrap.Project(tmp_path).query("SELECT count(*) AS n FROM sales.orders").column("n").to_pylist()
    assert before == after == [3]


def test_an_unlisted_on_failure_hook_does_not_run_when_the_plan_fails(tmp_path: Path) -> None:
    """A model that cannot be planned still cannot run a script [security] scripts does not list."""
    project(tmp_path, model("-- on_failure hooks/record.py"), toml="")
    # the plan fails before the step: a `-- test sql` file that does not exist
    (tmp_path / "models" / "sales" / "orders.sql").write_text(
        model("-- on_failure hooks/record.py", extra="-- test sql tests/missing.sql"))
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (result,) = report.results
    assert result.status == "failed" and "tests/missing.sql" in (result.error or "")
    assert not (tmp_path / "out").exists(), "the unlisted hook must not have run"
    assert any("on_failure hook hooks/record.py not run" in w for w in result.warnings), result.warnings

    (tmp_path / "lakewrap.toml").write_text(TOML)  # listed: it runs, and sees the plan's error
    report = run_project(tmp_path, partition="2024-01-02", now=NOW)
    (seen,) = records(tmp_path, "on_failure-2024-01-02")
    assert "tests/missing.sql" in seen["context"]["error"] and seen["context"]["partition"]["start"] is None
