"""`lakewrap docs generate` and `docs serve` without a browser (tests/test_docs_browser.py drives a
real Chromium): the site's files, every asset local, escaping, the lake's facts read and nothing
written, the server on 127.0.0.1. The lake's facts are compared with the lake's own tables, read
with `lakewrap query`."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from helpers import run
from lakewrap.docsite import layout, strip
from lakewrap.docsite_serve import server
from lakewrap.errors import ConfigError
from lakewrap.inspect import query

ROOT = Path(__file__).resolve().parents[1]
MODELS = ["marts.customer_history", "marts.customer_segments", "marts.revenue_by_customer",
          "sales.order_events", "sales.orders",
          "sales.orders_daily", "staging.customers"]


def _shop(folder: Path) -> Path:
    root = folder / "shop"
    shutil.copytree(ROOT / "examples" / "shop", root, ignore=shutil.ignore_patterns("target", ".lakewrap"))
    return root


@pytest.fixture(scope="module")
def lake_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/shop seeded and run for three days, then its site generated."""
    root = _shop(tmp_path_factory.mktemp("docsite"))
    for args in (["seed"], ["run", "--start", "2024-01-01", "--end", "2024-01-03"]):
        code, out, err = run(*args, "--project", str(root))
        assert code == 0, out + err
    return root


def _snapshots(root: Path) -> list[tuple[object, ...]]:
    return query(root, "SELECT snapshot_id, schema_version FROM ducklake_snapshots('lake') ORDER BY 1").rows


def _generate(root: Path) -> dict[str, object]:
    code, out, err = run("docs", "generate", "--project", str(root), "--now", "2024-01-10T00:00:00Z")
    assert code == 0, out + err
    return json.loads((root / "target" / "docs" / "data.json").read_text())  # type: ignore[no-any-return]


def test_without_a_lake_the_site_is_written_and_says_so(tmp_path: Path) -> None:
    root = _shop(tmp_path)
    data = _generate(root)
    site = root / "target" / "docs"
    assert not (root / ".lakewrap").exists()  # no lake was made
    assert sorted(p.name for p in (site / "models").iterdir()) == [f"{m}.html" for m in MODELS]
    assert sorted(p.name for p in (site / "sources").iterdir()) == ["raw.customers.html", "raw.orders.html"]
    assert data["has_lake"] is False
    page = (site / "models" / "sales.orders.html").read_text()
    assert "No lake to read" in page and "Recent history" not in page and "not run yet" in page
    # the compiled SQL of the model's strategy, as `lakewrap compile` prints it
    code, compiled, _ = run("compile", "sales.orders", "--project", str(root), "--now", "2024-01-10T00:00:00Z")
    assert code == 0
    orders = next(m for m in data["models"] if m["key"] == "sales.orders")  # type: ignore[attr-defined]
    assert orders["compiled"] == compiled and "MERGE INTO" in compiled
    assert orders["compiled_for"] == "2024-01-09"


def test_every_asset_is_local(tmp_path: Path) -> None:
    root = _shop(tmp_path)
    _generate(root)
    site = root / "target" / "docs"
    files = [p for p in site.rglob("*") if p.is_file()]
    assert {p.suffix for p in files} == {".html", ".js", ".css", ".json"}
    for path in files:
        if path.suffix == ".json":
            continue
        text = path.read_text()
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), path
        assert "@import" not in text and "url(http" not in text, path
        for ref in re.findall(r"""(?:src|href)="([^"#:]+)["#]""", text):  # every local reference exists
            assert (path.parent / ref).resolve().is_file(), (path, ref)


def test_descriptions_and_column_contracts_are_shown_escaped(tmp_path: Path) -> None:
    root = _shop(tmp_path)
    model = root / "models" / "staging" / "customers.sql"
    model.write_text('-- materialized view\n-- description "Customers <script>alert(1)</script> & co"\n'
                     '-- column customer_id BIGINT not_null "the <b>key</b>"\n-- column name VARCHAR\n'
                     '-- column country VARCHAR\n-- column tier VARCHAR\n-- column updated_at TIMESTAMP\n'
                     'SELECT customer_id, name, upper(country) AS country, tier, updated_at\nFROM raw.customers\n')
    data = _generate(root)
    page = (root / "target" / "docs" / "models" / "staging.customers.html").read_text()
    assert "<script>alert(1)" not in page
    assert "Customers &lt;script&gt;alert(1)&lt;/script&gt; &amp; co" in page
    assert "the &lt;b&gt;key&lt;/b&gt;" in page
    staging = next(m for m in data["models"] if m["key"] == "staging.customers")  # type: ignore[attr-defined]
    assert staging["columns"][0] == {"name": "customer_id", "type": "BIGINT", "description": "the <b>key</b>"}
    # search index carries the description; the embedded JSON cannot close its script element
    index = (root / "target" / "docs" / "assets" / "search.js").read_text()
    assert "</script>" not in index and "<\\/script>" in index


def test_with_a_lake_the_site_shows_what_it_recorded_and_writes_nothing(lake_site: Path) -> None:
    before = _snapshots(lake_site)
    runs = query(lake_site, "SELECT count(*) FROM lakewrap_runs").rows
    data = _generate(lake_site)
    assert _snapshots(lake_site) == before  # not one snapshot more
    assert query(lake_site, "SELECT count(*) FROM lakewrap_runs").rows == runs
    assert data["has_lake"] is True
    models = {m["key"]: m for m in data["models"]}  # type: ignore[attr-defined]
    recorded = query(lake_site, "SELECT target, partition_value, rows_inserted FROM lakewrap.materializations "
                     "ORDER BY committed_at DESC").rows
    for key in MODELS:
        mine = [(key, h["partition"], h["rows_inserted"]) for h in models[key]["history"]]
        assert mine == [r for r in recorded if r[0].lower() == key][:10], key
    orders = models["sales.orders"]
    cells = orders["strip"]["cells"]
    assert [c["value"] for c in cells if c["state"] == "materialized"] == ["2024-01-01", "2024-01-02", "2024-01-03"]
    assert [c["value"] for c in cells if c["state"] == "gap"] == [f"2024-01-0{d}" for d in range(4, 10)]
    # the column types are the lake tables' own
    described = query(lake_site, "DESCRIBE sales.orders_daily").rows
    daily = models["sales.orders_daily"]
    assert [(c["name"], c["type"]) for c in daily["columns"]] == [(r[0], r[1]) for r in described]
    # each test's last outcome, from the run's results file
    tests = {t["kind"]: t["last"] for t in orders["tests"]}
    assert tests["not_null"]["status"] == "pass" and tests["accepted_values"]["partition"] == "2024-01-03"
    page = (lake_site / "target" / "docs" / "models" / "sales.orders.html").read_text()
    assert page.count('class="cell materialized"') == 3 + 1  # the strip and its legend
    # the recent runs, from the run log
    logged = query(lake_site, "SELECT run_id, command, status FROM lakewrap_runs ORDER BY started_at DESC").rows
    assert [(r["run_id"], r["command"], r["status"]) for r in data["runs"]] == logged  # type: ignore[attr-defined]
    assert [r[1] for r in logged] == ["run", "seed"]


def test_the_strip_and_the_layout() -> None:
    s = strip(["2024-01-02"], ["2024-01-01", *[f"2024-01-{d:02d}" for d in range(3, 31)]], ["2024-01-02"])
    assert [c["state"] for c in s["cells"][:3]] == ["gap", "stale", "gap"]
    assert len(s["cells"]) == 2 + 7 and s["later_gaps"] == 30 - 9 and s["last_gap"] == "2024-01-30"
    g = layout([("a.m", ["raw.s"]), ("a.n", ["a.m", "raw.s"]), ("a.o", [])], ["raw.s"])
    layers = {n["key"]: n["layer"] for n in g["nodes"]}
    assert layers == {"raw.s": 0, "a.m": 1, "a.n": 2, "a.o": 0}
    assert sorted(map(tuple, g["edges"])) == [("a.m", "a.n"), ("raw.s", "a.m"), ("raw.s", "a.n")]


def test_serve_answers_on_127_0_0_1_and_refuses_a_missing_site(tmp_path: Path) -> None:
    root = _shop(tmp_path)
    with pytest.raises(ConfigError, match="lakewrap docs generate"):
        server(root / "target" / "docs", 0)
    _generate(root)
    httpd = server(root / "target" / "docs", 0)
    host, port = httpd.server_address[:2]
    assert host == "127.0.0.1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/models/sales.orders.html", timeout=10) as resp:
            assert resp.status == 200 and b"sales.orders" in resp.read()
        with pytest.raises(urllib.error.HTTPError) as missing:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/nope.html", timeout=10)
        assert missing.value.code == 404
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


def test_the_serve_command_stops_cleanly_on_ctrl_c(tmp_path: Path) -> None:
    root = _shop(tmp_path)
    _generate(root)
    lakewrap = str(Path(sys.executable).with_name("lakewrap"))
    proc = subprocess.Popen([lakewrap, "docs", "serve", "--port", "0", "--project", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "NO_COLOR": "1"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:\d+/", line)
        assert url, line
        with urllib.request.urlopen(url.group(0) + "index.html", timeout=10) as resp:
            assert b'id="graph"' in resp.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "stopped" in err


@pytest.mark.parametrize("command", [["docs", "generate"], ["docs", "serve", "--port", "0"]],
                         ids=["generate", "serve"])
def test_a_folder_that_is_not_a_project_is_refused_and_left_untouched(tmp_path: Path, command: list[str]) -> None:
    folder = tmp_path / "EMPTY_DIR"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a project\n")
    code, _, err = run(*command, "--project", str(folder))
    assert code == 2 and "is not a lakewrap project" in err
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]
