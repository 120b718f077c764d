"""A tiny daily-partitioned project for the job-queue tests, its expected rows computed in Python,
worker processes started as a user starts them (``python -m lakewrap worker``)."""

from __future__ import annotations

import hashlib
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

START = datetime(2024, 1, 1)

# Three rows per day: (day, x, x * day-of-month)
EV = """\
-- materialized incremental
-- partitioned daily key=d start=2024-01-01
SELECT CAST($partition_start AS TIMESTAMP) AS d, x, x * day(CAST($partition_start AS TIMESTAMP)) AS y
FROM range(3) t(x)
"""
# The same, with a pre_run hook that stops at one partition until a gate file exists.
GATED = EV.replace("-- partitioned", "-- pre_run hooks/gate.sh timeout=300\n-- partitioned")
GATE = """\
#!/bin/sh
if [ "$LAKEWRAP_PARTITION_VALUE" = "$(cat target/gate_at)" ]; then
  touch target/reached
  while [ ! -e target/gate ]; do sleep 0.05; done
fi
"""


def day(i: int) -> str:
    return (START + timedelta(days=i)).strftime("%Y-%m-%d")


def expected_rows(days: range) -> list[tuple[Any, ...]]:
    """What ``core.ev`` holds after ``days`` ran, computed without lakewrap or DuckDB."""
    out = []
    for i in days:
        d = START + timedelta(days=i)
        out += [(d, x, x * d.day) for x in range(3)]
    return sorted(out)


def write_project(root: Path, toml: str = "", *, gated: bool = False) -> Path:
    (root / "models" / "core").mkdir(parents=True, exist_ok=True)
    (root / "models" / "core" / "ev.sql").write_text(GATED if gated else EV)
    if gated:
        (root / "hooks").mkdir(exist_ok=True)
        hook = root / "hooks" / "gate.sh"
        hook.write_text(GATE)
        hook.chmod(0o755)
        toml += '\n[security]\nscripts = ["hooks"]\n'
        (root / "target").mkdir(exist_ok=True)
    (root / "lakewrap.toml").write_text(toml)
    return root


def pg_toml(pg: Any) -> str:
    """``[lake]`` on a new database of the session's PostgreSQL (PGPASSWORD set by the caller)."""
    dsn = pg.create_database(f"q_{secrets.token_hex(4)}")
    return f'[lake]\ncatalog = "postgres"\ndsn = "{dsn}"\n'


def table_rows(root: Path, sql: str = "SELECT d, x, y FROM core.ev ORDER BY ALL") -> list[tuple[Any, ...]]:
    from lakewrap.execute.lake import Lake

    con = Lake.open(root, read_only=True).connect()
    try:
        return [tuple(r) for r in con.execute(sql).fetchall()]
    finally:
        con.close()


def digest(rows: list[tuple[Any, ...]]) -> str:
    return hashlib.sha256(repr(sorted(rows)).encode()).hexdigest()


def worker(root: Path, *args: str, log: Path | None = None) -> subprocess.Popen[bytes]:
    """``lakewrap worker --project root *args`` in a process of its own."""
    out = open(log, "wb") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    return subprocess.Popen([sys.executable, "-m", "lakewrap", "worker", "--project", str(root), *args],
                            stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))


def wait_for(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    """Poll ``check()`` until it returns something truthy (the condition is the event)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
