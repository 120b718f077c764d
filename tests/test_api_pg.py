"""`lakewrap serve` on a PostgreSQL catalog over real HTTP: it starts no worker (separate
`lakewrap worker` processes drain the queue it fills), and its run-log reads, which keep one
read-only session open between requests, see the runs that workers commit afterwards (the session
opened before the run log existed, and after)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api_serve import serving, wait_job
from queueproject import day, expected_rows, pg_toml, table_rows, worker, write_project
from servers import Postgres, postgres  # noqa: F401  (fixture)

pytestmark = pytest.mark.postgres


def drain(root: Path, log: Path) -> None:
    proc = worker(root, "--once", log=log)
    assert proc.wait(timeout=300) == 0, log.read_text()


def test_serve_on_postgres_reads_what_workers_commit(tmp_path: Path, postgres: Postgres,  # noqa: F811
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGPASSWORD", postgres.password)
    root = write_project(tmp_path / "project", pg_toml(postgres))
    with serving(root) as served, httpx.Client(base_url=served.url, timeout=60) as client:
        assert client.get("/runs").json() == {"runs": []}  # no lake yet, so no run log
        assert client.get("/runs/20990101T000000Z-000000").status_code == 404
        models = client.get("/models")  # the lake's state: a 400 that says what to do
        assert models.status_code == 400 and "does not exist yet" in models.json()["error"], models.text
        assert "lakewrap run" in models.json()["hint"]
        seen = []
        for i in range(2):
            response = client.post("/runs", json={"select": ["ev"], "partition": day(i)})
            assert response.status_code == 202, response.text
            job_id = response.json()["job_id"]
            assert client.get(f"/jobs/{job_id}").json()["status"] == "queued"  # nobody drains but us
            drain(root, tmp_path / f"worker{i}.log")
            job = wait_job(client, job_id)
            assert job["status"] == "succeeded", job
            got = client.get(f"/runs/{job['run_id']}").json()
            assert got["run"]["status"] == "success", got
            assert [(s["target"], s["partition"], s["rows_inserted"]) for s in got["steps"]] == [
                ("core.ev", day(i), 3)]
            seen.append(job["run_id"])
            assert [r["run_id"] for r in client.get("/runs").json()["runs"]] == seen[::-1]
        assert client.get("/runs/20990101T000000Z-000000").status_code == 404
    assert "worker: started" not in served.output() and "Traceback" not in served.output()
    assert table_rows(root) == expected_rows(range(2))
