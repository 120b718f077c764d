"""The documentation site in a real headless Chromium (Debian's `chromium` and `chromium-driver`,
driven by Selenium), on examples/shop copied, seeded, run and its site generated and served by
`lakewrap.docsite_serve` on 127.0.0.1. One browser session for the whole file.

Every model page is reached by clicking its node in the graph; the search finds a model; the lineage
panel lists the upstream columns written here by hand; the pan and zoom change the view; no page
logs a console error (the browser's log is read after every test). A screenshot of the graph page
is saved as `target/docs-graph.png` in the repository (git-ignored) for a person to look at.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import WebDriverWait

from chromium import chromium
from helpers import run
from lakewrap.docsite_serve import server

ROOT = Path(__file__).resolve().parents[1]
MODELS = {"marts.customer_history", "marts.customer_segments", "marts.revenue_by_customer",
          "sales.order_events", "sales.orders",
          "sales.orders_daily", "staging.customers"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of examples/shop's site, seeded, run for three days and generated."""
    root = tmp_path_factory.mktemp("browser") / "shop"
    shutil.copytree(ROOT / "examples" / "shop", root, ignore=shutil.ignore_patterns("target", ".lakewrap"))
    for args in (["seed"], ["run", "--start", "2024-01-01", "--end", "2024-01-03"], ["docs", "generate"]):
        code, out, err = run(*args, "--project", str(root))
        assert code == 0, out + err
    httpd = server(root / "target" / "docs", 0)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    httpd.shutdown()
    httpd.server_close()
    thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium("browser") as driver:
        yield driver


@pytest.fixture
def page(browser: Any, site: str) -> Iterator[Any]:
    browser.get_log("browser")  # what an earlier test left
    yield browser
    errors = [e for e in browser.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]
    assert errors == [], errors


def _open_graph(page: Any, site: str) -> None:
    page.get(site + "index.html")
    WebDriverWait(page, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg#graph a.node"))


def test_every_model_page_is_reached_by_clicking_its_node(page: Any, site: str) -> None:
    _open_graph(page, site)
    keys = {n.get_attribute("data-key") for n in page.find_elements(By.CSS_SELECTOR, "svg#graph a.node.model")}
    assert keys == MODELS
    shot = ROOT / "target" / "docs-graph.png"
    shot.parent.mkdir(exist_ok=True)
    assert page.save_screenshot(str(shot))
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for key in sorted(MODELS):
        _open_graph(page, site)
        page.find_element(By.CSS_SELECTOR, f'svg#graph a.node[data-key="{key}"] rect').click()
        WebDriverWait(page, 10).until(lambda d, k=key: d.current_url.endswith(f"/models/{k}.html"))
        assert page.find_element(By.TAG_NAME, "h1").text.split()[0] == key
        assert page.find_elements(By.CSS_SELECTOR, "table.cols button.column")  # its columns are listed


def _view_box(page: Any) -> list[float]:
    text = page.execute_script("return document.getElementById('graph').getAttribute('viewBox')")
    return [float(v) for v in text.split()]


def test_the_graph_pans_and_zooms(page: Any, site: str) -> None:
    _open_graph(page, site)
    svg = page.find_element(By.ID, "graph")
    start = _view_box(page)
    page.find_element(By.CSS_SELECTOR, '[data-zoom="in"]').click()
    zoomed = _view_box(page)
    assert zoomed[2] < start[2] and zoomed[3] < start[3]
    ActionChains(page).move_to_element_with_offset(svg, 0, -150).click_and_hold().move_by_offset(120, 40) \
        .release().perform()
    panned = _view_box(page)
    assert panned[0] < zoomed[0] and panned[1] < zoomed[1] and panned[2:] == zoomed[2:]  # dragged right, down
    assert page.current_url.endswith("/index.html")  # a drag is no click
    page.find_element(By.CSS_SELECTOR, '[data-zoom="reset"]').click()
    assert _view_box(page) == start


def test_search_finds_a_model(page: Any, site: str) -> None:
    page.get(site + "sources/raw.orders.html")
    box = page.find_element(By.ID, "search")
    box.send_keys("orders_da")
    hits = WebDriverWait(page, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results a.hit"))
    assert [h.text for h in hits] == ["sales.orders_daily"]
    box.send_keys(Keys.ENTER)
    WebDriverWait(page, 10).until(lambda d: d.current_url.endswith("/models/sales.orders_daily.html"))
    box = page.find_element(By.ID, "search")
    box.send_keys("country")  # a column name finds the relations that have it
    hits = WebDriverWait(page, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#search-results a.hit"))
    assert {h.text for h in hits} == {"raw.customers", "staging.customers", "marts.customer_history",
                                      "marts.revenue_by_customer"}


def _lineage(page: Any, site: str, model: str, column: str) -> tuple[list[str], list[str]]:
    page.get(site + f"models/{model}.html")
    page.find_element(By.CSS_SELECTOR, f'button.column[data-column="{column}"]').click()
    WebDriverWait(page, 10).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#lineage-body .sources"))
    sources = [a.text for a in page.find_elements(By.CSS_SELECTOR, "#lineage-body a.source-column")]
    upstream = [a.text for a in page.find_elements(By.CSS_SELECTOR, "#lineage-body .lineage-upstream a.col")]
    return sources, upstream


def test_the_lineage_panel_shows_the_upstream_columns(page: Any, site: str) -> None:
    sources, upstream = _lineage(page, site, "sales.orders_daily", "revenue")
    assert page.find_element(By.CSS_SELECTOR, "#lineage-body .computed code").text == "SUM(orders.amount)"
    assert sources == ["raw.orders.amount"]
    assert upstream == ["sales.orders.amount", "raw.orders.amount"]
    sources, upstream = _lineage(page, site, "marts.revenue_by_customer", "country")
    assert sources == ["raw.customers.country"]
    assert upstream == ["staging.customers.country", "raw.customers.country"]
    sources, upstream = _lineage(page, site, "sales.orders_daily", "orders")  # count(*)
    assert sources == [] and upstream == []
    # a column of the tree links to its relation's page
    _lineage(page, site, "sales.orders_daily", "revenue")
    page.find_element(By.CSS_SELECTOR, "#lineage-body .lineage-upstream a.col").click()
    WebDriverWait(page, 10).until(lambda d: d.current_url.endswith("/models/sales.orders.html"))


def test_a_model_page_shows_partitions_tests_and_history(page: Any, site: str) -> None:
    page.get(site + "models/sales.orders.html")
    cells = page.find_elements(By.CSS_SELECTOR, ".strip .cell.materialized")
    assert [c.get_attribute("title") for c in cells] == [f"2024-01-0{d}: materialized" for d in (1, 2, 3)]
    outcomes = [o.text for o in page.find_elements(By.CSS_SELECTOR, "span.outcome.pass")]
    assert outcomes == ["pass", "pass"]
    rows = page.find_elements(By.CSS_SELECTOR, "table.history tbody tr")
    assert len(rows) == 3
