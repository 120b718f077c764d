"""`lakewrap serve` over real HTTP: uvicorn on 127.0.0.1 in a subprocess (with the worker it starts
on the example's DuckDB-file catalog), requests with httpx.

One server for the module (examples/shop seeded and run for 2024-01-01..02, a token set, a canary
AWS secret in its environment). Checked: /healthz without a token, 401 JSON without or with a wrong
token on every other endpoint, bad requests answered 4xx as `{"error", "hint"}` with nothing
written, POST /runs queued and run by the worker (its run's steps through GET /runs/{id}, the
table's rows against a reference computed by plain DuckDB from the seed CSV), a resume job, the
models' partitions against the lake's records, freshness of a model and a source at controlled
instants (`?now=`) against the seed CSV and `lakewrap freshness --format json`, a 500 without a
traceback, no secret in any answer, and `serve` refusing a non-loopback address without a token.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import duckdb
import httpx
import pytest

from api_serve import ROOT, Served, serving, shop, wait_job
from helpers import run

TOKEN = "tok-7f3a9c1e5b2d"
CANARY = "canary-secret-4d8e2b7a"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


FRESHNESS = "-- freshness warn_after=1h error_after=6h\n"
SOURCE = '\n[sources."raw.orders"]\nloaded_at = "updated_at"\nwarn_after = "1d"\nerror_after = "30d"\n'


def with_freshness(root: Path) -> None:
    """A freshness policy on sales.orders_daily and a [sources] table with a loaded_at column."""
    model = root / "models" / "sales" / "orders_daily.sql"
    model.write_text(FRESHNESS + model.read_text())
    with (root / "lakewrap.toml").open("a") as toml:
        toml.write(SOURCE)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shop(tmp_path_factory.mktemp("api"), edit=with_freshness)


@pytest.fixture(scope="module")
def server(project: Path) -> Iterator[Served]:
    with serving(project, env={"LAKEWRAP_API_TOKEN": TOKEN, "AWS_SECRET_ACCESS_KEY": CANARY}) as served:
        yield served
    assert "Traceback" not in served.output()


@pytest.fixture
def client(server: Served) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=server.url, headers=AUTH, timeout=60) as c:
        yield c


def clean(response: httpx.Response) -> Any:
    """The JSON body, checked to hold no traceback, token or secret."""
    text = response.text
    assert "Traceback" not in text and TOKEN not in text and CANARY not in text, text
    assert response.headers["content-type"].startswith("application/json"), response.headers
    return response.json()


def assert_error(response: httpx.Response, status: int, *words: str) -> dict[str, Any]:
    body: dict[str, Any] = clean(response)
    assert response.status_code == status, (response.status_code, body)
    assert set(body) >= {"error", "hint"} and isinstance(body["error"], str), body
    for w in words:
        assert w in body["error"], body
    return body


def test_healthz_needs_no_token(server: Served) -> None:
    response = httpx.get(server.url + "/healthz")
    assert response.status_code == 200 and clean(response)["ok"] is True


@pytest.mark.parametrize("path", ["/runs", "/models", "/jobs/1", "/openapi.json", "/runs/x/logs", "/freshness"])
def test_every_other_call_needs_the_token(server: Served, path: str) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}, {"Authorization": "Basic x"}):
        response = httpx.get(server.url + path, headers=headers)
        assert_error(response, 401, "token")
        assert response.headers["www-authenticate"] == "Bearer"
    assert_error(httpx.post(server.url + "/runs", json={"select": ["orders"]}), 401)
    assert httpx.get(server.url + path, headers=AUTH).status_code in (200, 404)


def test_openapi_lists_the_endpoints(client: httpx.Client) -> None:
    paths = clean(client.get("/openapi.json"))["paths"]
    assert {"/runs", "/runs/{run_id}", "/runs/{run_id}/logs", "/runs/{run_id}/resume", "/jobs/{job_id}",
            "/models", "/models/{target}", "/freshness", "/healthz"} <= set(paths)
    assert set(paths["/runs"]) == {"get", "post"}


def jobs(client: httpx.Client) -> list[dict[str, Any]]:
    return list(clean(client.get("/jobs"))["jobs"])


def test_bad_requests_are_4xx_json_and_queue_nothing(client: httpx.Client) -> None:
    before = jobs(client)
    assert_error(client.post("/runs", json={"select": ["nope"]}), 400, "nope")
    body = assert_error(client.post("/runs", json={"select": ["orders_daily"], "partition": "2024-13-01"}), 400,
                        "2024-13-01")
    assert "YYYY-MM-DD" in body["hint"]
    assert_error(client.post("/runs", json={"select": ["orders_daily"], "start": "2024-01-01"}), 400)
    assert_error(client.post("/runs", json={"select": ["orders_daily"], "partition": "2024-01-01",
                                            "start": "2024-01-01", "end": "2024-01-02"}), 400, "not both")
    assert assert_error(client.post("/runs", json={"select": []}), 422)["field"] == "select"
    assert assert_error(client.post("/runs", json={"select": ["x"], "workers": 3}), 422)["field"] == "workers"
    assert_error(client.post("/runs", content=b"{not json", headers={"content-type": "application/json"}), 422)
    assert_error(client.post("/runs", json=["orders"]), 422)
    assert_error(client.get("/jobs/abc"), 422)
    assert_error(client.get("/jobs/987654"), 404, "987654")
    assert_error(client.get("/runs/20990101T000000Z-000000"), 404, "no run")
    assert_error(client.get("/runs/20990101T000000Z-000000/logs"), 404, "no run")
    assert_error(client.post("/runs/20990101T000000Z-000000/resume"), 404, "no run")
    assert_error(client.get("/runs", params={"status": "weird"}), 400, "weird")
    assert_error(client.get("/runs", params={"limit": 0}), 422)
    body = assert_error(client.get("/models/sales.orders_dayly"), 404, "orders_dayly")
    assert "sales.orders_daily" in body["hint"]
    assert_error(client.get("/models/tag:sales"), 404)
    assert_error(client.get("/nowhere"), 404)
    assert_error(client.delete("/runs"), 405)
    assert jobs(client) == before


def test_no_secret_in_any_answer(client: httpx.Client) -> None:
    body = assert_error(client.post("/runs", json={"select": [CANARY]}), 400)
    assert "***" in body["error"]
    assert "***" in assert_error(client.get(f"/models/{TOKEN}"), 404)["error"]


def reference_daily(day: str) -> list[tuple[str, int, float]]:
    """orders_daily's rows of ``day`` computed by plain DuckDB from the seed CSV (the latest version of
    each order by updated_at, as sales.orders keeps it)."""
    con = duckdb.connect()
    rows = con.execute(
        "WITH o AS (SELECT * FROM read_csv_auto($p) QUALIFY row_number() OVER (PARTITION BY order_id "
        "ORDER BY updated_at DESC) = 1) SELECT status, count(*), CAST(sum(CAST(amount AS DECIMAL(18, 2))) AS DOUBLE) "
        "FROM o WHERE CAST(created_at AS DATE) = CAST($d AS DATE) GROUP BY ALL ORDER BY ALL",
        {"p": str(ROOT / "examples" / "shop" / "seeds" / "raw" / "orders.csv"), "d": day}).fetchall()
    return [(str(s), int(n), float(r)) for s, n, r in rows]


def lake_daily(project: Path, day: str) -> list[tuple[str, int, float]]:
    code, out, err = run("query", "--project", str(project), "--wait", "60", "--format", "json",
                         f"SELECT status, orders, CAST(revenue AS DOUBLE) AS revenue FROM sales.orders_daily "
                         f"WHERE CAST(order_day AS DATE) = DATE '{day}' ORDER BY ALL")
    assert code == 0, out + err
    doc = json.loads(out)
    rows = doc["rows"] if isinstance(doc, dict) else doc
    return [(r["status"], int(r["orders"]), float(r["revenue"])) if isinstance(r, dict) else
            (str(r[0]), int(r[1]), float(r[2])) for r in rows]


def test_post_runs_queues_a_job_the_worker_runs(client: httpx.Client, project: Path) -> None:
    response = client.post("/runs", json={"select": ["+orders_daily"], "partition": "2024-01-03"})
    body = clean(response)
    assert response.status_code == 202 and body["status"] == "queued" and isinstance(body["job_id"], int), body
    assert body["job"]["requested_by"] == "api" and body["job"]["partition"] == "2024-01-03"
    job = wait_job(client, body["job_id"])
    assert job["status"] == "succeeded", job
    run_id = job["run_id"]
    got = clean(client.get(f"/runs/{run_id}"))
    assert got["run"]["run_id"] == run_id and got["run"]["status"] == "success"
    assert [(s["target"], s["partition"], s["status"]) for s in got["steps"]] == [
        ("sales.orders", "2024-01-03", "success"), ("sales.orders_daily", "2024-01-03", "success")]
    assert all(s["attempt_log"] and s["attempt_log"][-1]["outcome"] == "committed" for s in got["steps"])
    expected = reference_daily("2024-01-03")
    assert expected and lake_daily(project, "2024-01-03") == expected
    assert got["steps"][1]["rows_inserted"] == len(expected)  # one row per status
    lines = clean(client.get(f"/runs/{run_id}/logs"))["lines"]
    assert lines[0]["message"].startswith("run started") and lines[-1]["message"] == "run success"
    assert run_id in [r["run_id"] for r in clean(client.get("/runs", params={"status": "success"}))["runs"]]
    assert run_id not in [r["run_id"] for r in clean(client.get("/runs", params={"status": "failed"}))["runs"]]
    model = clean(client.get("/models/sales.orders_daily"))
    assert model["partitions"] == ["2024-01-01", "2024-01-02", "2024-01-03"] and model["last_run"] == run_id
    cells = model["strip"]["cells"]
    assert [c["state"] for c in cells] == ["materialized"] * 3 + ["gap"] * 7
    assert [c["value"] for c in cells[3:]] == model["gaps"][:7]
    assert model["strip"]["later_gaps"] == len(model["gaps"]) - 7 and model["strip"]["last_gap"] == model["gaps"][-1]


def test_a_range_and_a_resume(client: httpx.Client) -> None:
    body = clean(client.post("/runs", json={"select": ["orders"], "start": "2024-01-04", "end": "2024-01-05"}))
    job = wait_job(client, body["job_id"])
    assert job["status"] == "succeeded", job
    steps = clean(client.get(f"/runs/{job['run_id']}"))["steps"]
    assert [s["partition"] for s in steps] == ["2024-01-04", "2024-01-05"]
    response = client.post(f"/runs/{job['run_id']}/resume")
    again = clean(response)
    assert response.status_code == 202 and again["job"]["kind"] == "resume"
    assert again["job"]["resume_of"] == job["run_id"] and again["job_id"] != body["job_id"]
    done = wait_job(client, again["job_id"])
    assert done["status"] == "succeeded" and done["run_id"] == job["run_id"], done


def test_models_agree_with_status(client: httpx.Client, project: Path) -> None:
    listed = clean(client.get("/models"))["models"]
    code, out, err = run("status", "--project", str(project), "--wait", "60", "--format", "json")
    assert code == 0, out + err
    status = {r["target"]: r for r in json.loads(out)}
    assert [m["target"] for m in listed] == list(status)
    for m in listed:
        assert m["partitions"] == len(status[m["target"]]["partitions"]) and m["last_run"] == status[m["target"]][
            "last_run"]
    one = clean(client.get("/models/sales.orders"))
    assert one["partitions"] == status["sales.orders"]["partitions"] and one["gaps"] == status["sales.orders"]["gaps"]


def at(instant: datetime) -> str:
    return instant.isoformat().replace("+00:00", "Z")


def cli_freshness(project: Path, now: datetime, *selectors: str) -> tuple[int, list[dict[str, Any]]]:
    code, out, err = run("freshness", *selectors, "--project", str(project), "--format", "json", "--now", at(now))
    assert code in (0, 1), out + err
    return code, json.loads(out)


def test_freshness_of_models_and_sources(client: httpx.Client, project: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKEWRAP_WAIT", "60")
    listed = {m["target"]: m for m in clean(client.get("/models"))["models"]}
    daily = listed["sales.orders_daily"]["freshness"]
    assert (daily["warn_after"], daily["error_after"], daily["basis"]) == (3600, 21600, "last materialization")
    loaded = datetime.fromisoformat(daily["loaded_at"])
    assert loaded == datetime.fromisoformat(listed["sales.orders_daily"]["last_committed_at"])
    assert abs((datetime.now(timezone.utc) - loaded).total_seconds() - daily["age_seconds"]) < 120
    plain = listed["sales.orders"]["freshness"]  # no policy: no thresholds, ok once built
    assert (plain["warn_after"], plain["error_after"], plain["state"]) == (None, None, "ok")
    for later, state in ((timedelta(minutes=30), "ok"), (timedelta(hours=2), "warn"), (timedelta(hours=7), "error")):
        now = loaded + later
        one = clean(client.get("/models/sales.orders_daily", params={"now": at(now)}))["freshness"]
        assert (one["state"], one["age_seconds"]) == (state, later.total_seconds()), one
        code, cli = cli_freshness(project, now, "sales.orders_daily")
        assert cli == [{"kind": "model", "name": "sales.orders_daily", **one}] and code == (state == "error")
        again = {m["target"]: m for m in clean(client.get("/models", params={"now": at(now)}))["models"]}
        assert again["sales.orders_daily"]["freshness"] == one
    # the source: max(updated_at) of the seed CSV, read by plain DuckDB
    newest = duckdb.connect().execute("SELECT max(CAST(updated_at AS TIMESTAMP)) FROM read_csv_auto($p)", {
        "p": str(ROOT / "examples" / "shop" / "seeds" / "raw" / "orders.csv")}).fetchone()[0]
    newest = newest.replace(tzinfo=timezone.utc)
    for later, state, breach in ((timedelta(hours=3), "ok", False), (timedelta(days=2), "warn", False),
                                 (timedelta(days=31), "error", True)):
        now = newest + later
        body = clean(client.get("/freshness", params={"now": at(now)}))
        rows = {r["name"]: r for r in body["freshness"]}
        assert set(rows) == {"sales.orders_daily", "raw.orders"} and body["breached"] is breach, body
        src = rows["raw.orders"]
        assert (src["kind"], src["basis"], src["state"], src["age_seconds"]) == (
            "source", "max(updated_at)", state, later.total_seconds()), src
        assert datetime.fromisoformat(src["loaded_at"]) == newest
        assert rows["sales.orders_daily"]["state"] == "ok"  # measured before it was built: age 0
        code, cli = cli_freshness(project, now)
        assert cli == body["freshness"] and code == int(breach)
    assert_error(client.get("/freshness", params={"now": "yesterday"}), 400, "yesterday")
    assert_error(client.get("/models/sales.orders", params={"now": "2024-13-01"}), 400, "2024-13-01")


def test_a_bug_is_a_500_without_traceback(tmp_path: Path) -> None:
    root = shop(tmp_path, days=None)
    with serving(root, "--no-worker") as served:
        (root / ".lakewrap" / "lake.ducklake-jobs").write_bytes(b"this is no database file " * 100)
        response = httpx.get(served.url + "/jobs/1")
        body = assert_error(response, 500, "internal error", "DatabaseError")
        assert str(root) not in response.text and "bug" in body["hint"]
    assert "worker: started" not in served.output()


def test_serve_refuses_a_public_address_without_a_token(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAKEWRAP_API_TOKEN", raising=False)
    monkeypatch.delenv("LAKEWRAP_WAIT", raising=False)
    code, out, err = run("serve", "--host", "0.0.0.0", "--project", str(project))
    assert code == 2 and "without a token" in err and "LAKEWRAP_API_TOKEN" in err, out + err
    # a refused serve leaves its caller's environment alone (it once set LAKEWRAP_WAIT while parsing
    # its options, which made the later `lakewrap run`s of this test process wait for held catalogs)
    assert "LAKEWRAP_WAIT" not in os.environ
