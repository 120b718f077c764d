"""The operations page (`/ui` of `lakewrap serve`) in a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium), against a real server (uvicorn subprocess and its worker) on
examples/shop copied, seeded, run for 2024-01-01..02, with a model added that fails on 2024-01-02.

Checked: the page asks for the token and then lists the runs and each model's calendar strip;
a run's steps and log open from its row; the backfill form (selection, range, two workers) queues
two jobs through POST /runs, follows them by polling GET /jobs/{id} to their end, and the strip then
shows the partitions materialized and the failed one; no console error, no request to anything but
the server (the page's assets are local). A screenshot is saved as `target/ui-operations.png`
(git-ignored) for a person to look at.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from api_serve import ROOT, Served, serving, shop
from chromium import chromium

TOKEN = "ui-token-93b1c4"
FLAKY = """-- materialized incremental
-- partitioned daily key=day start=2024-01-01
-- description "one row per day; fails on 2024-01-02"
SELECT CAST($partition_start AS TIMESTAMP) AS day,
       CASE WHEN CAST($partition_start AS DATE) = DATE '2024-01-02' THEN error('boom on the second') ELSE 1 END AS n
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = shop(tmp_path_factory.mktemp("ui"))
    (root / "models" / "sales" / "flaky.sql").write_text(FLAKY)
    with serving(root, env={"LAKEWRAP_API_TOKEN": TOKEN}) as served:
        yield served
    assert "Traceback" not in served.output()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium("browser", "performance") as driver:
        yield driver


def wait(driver: Any, condition: Any, timeout: float = 60) -> Any:
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def strip_states(driver: Any, target: str) -> dict[str, str]:
    cells = driver.find_elements(By.CSS_SELECTOR, f'.strip[data-target="{target}"] .cell')
    return {c.get_attribute("data-partition"): c.get_attribute("data-state") for c in cells}


def console_errors(driver: Any) -> list[Any]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")
            and "401" not in e["message"]]  # the first load's answers before the token is given


def test_the_operations_page(browser: Any, server: Served) -> None:
    browser.get(server.url + "/ui")
    form = wait(browser, lambda d: d.find_element(By.ID, "token-form") if d.find_element(
        By.ID, "token-form").is_displayed() else False)
    assert "token" in browser.find_element(By.ID, "status").text
    browser.find_element(By.ID, "token").send_keys(TOKEN)
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded"))
    assert not browser.find_element(By.ID, "token-form").is_displayed()

    # the runs of the fixture's seed and run; the models with their strips
    runs = browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr.run")
    assert [[c.text for c in r.find_elements(By.TAG_NAME, "td")[1:3]] for r in runs] == [["run", "success"],
                                                                                         ["seed", "success"]]
    targets = [m.get_attribute("data-target") for m in browser.find_elements(By.CSS_SELECTOR, "#models .model")]
    assert "sales.orders_daily" in targets and "sales.flaky" in targets
    daily = strip_states(browser, "sales.orders_daily")
    assert (daily["2024-01-01"], daily["2024-01-02"], daily["2024-01-03"]) == ("materialized", "materialized", "gap")
    assert set(strip_states(browser, "sales.flaky").values()) == {"gap"}

    # a run's steps and log
    runs[0].find_element(By.CSS_SELECTOR, "button.show-run").click()
    wait(browser, lambda d: d.find_element(By.ID, "run-detail").is_displayed())
    steps = browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")
    assert len(steps) == 10 and all("success" in s.get_attribute("class") for s in steps)
    assert "run started" in browser.find_element(By.ID, "logs").text

    # a backfill of two jobs (two workers), followed to their end
    browser.find_element(By.ID, "select").send_keys("flaky")
    browser.find_element(By.ID, "start").send_keys("2024-01-01")
    browser.find_element(By.ID, "end").send_keys("2024-01-04")
    workers = browser.find_element(By.ID, "workers")
    workers.clear()
    workers.send_keys("2")
    loaded = browser.find_element(By.TAG_NAME, "body").get_attribute("data-loaded")
    browser.find_element(By.ID, "queue").click()
    wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#jobs tr.job")) == 2)
    wait(browser, lambda d: "backfill jobs succeeded" in d.find_element(By.ID, "status").text, 120)
    rows = browser.find_elements(By.CSS_SELECTOR, "#jobs tr.job")
    assert [r.find_elements(By.TAG_NAME, "td")[1].text for r in rows] == ["2024-01-01 .. 2024-01-02",
                                                                         "2024-01-03 .. 2024-01-04"]
    assert [r.find_element(By.CSS_SELECTOR, ".job-status").text.split(":")[0] for r in rows] == ["failed",
                                                                                                "succeeded"]
    assert rows[1].find_element(By.CSS_SELECTOR, ".job-steps").text == "2 of 2 succeeded"
    assert browser.find_element(By.ID, "status").text == "1 of 2 backfill jobs succeeded"
    wait(browser, lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-loaded") != loaded)  # refreshed
    assert len(browser.find_elements(By.CSS_SELECTOR, "#runs tbody tr.run")) == 4
    flaky = strip_states(browser, "sales.flaky")
    assert [flaky[d] for d in ("2024-01-01", "2024-01-02", "2024-01-03", "2024-01-04", "2024-01-05")] == [
        "materialized", "failed", "materialized", "materialized", "gap"]
    facts = browser.find_element(By.CSS_SELECTOR, '.model[data-target="sales.flaky"] .facts').text
    assert facts.startswith("3 partitions,") and "1 failed;" in facts

    # the failed run's steps: the error is shown
    failed = browser.find_element(By.CSS_SELECTOR, "#runs tbody tr.run.failed")
    failed.find_element(By.CSS_SELECTOR, "button.show-run").click()
    wait(browser, lambda d: "failed" in d.find_element(By.ID, "run-title").text)
    cells = [s.find_elements(By.TAG_NAME, "td") for s in browser.find_elements(By.CSS_SELECTOR, "#steps tbody tr")]
    assert [(c[2].text, c[3].text) for c in cells] == [("2024-01-01", "success"), ("2024-01-02", "failed")]
    assert "boom on the second" in cells[1][9].text
    assert "run failed" in browser.find_element(By.ID, "logs").text

    (ROOT / "target").mkdir(exist_ok=True)
    browser.save_screenshot(str(ROOT / "target" / "ui-operations.png"))
    assert console_errors(browser) == []
    events = [json.loads(e["message"])["message"] for e in browser.get_log("performance")]
    urls = {e["params"]["request"]["url"] for e in events if e["method"] == "Network.requestWillBeSent"
            and e["params"]["request"]["url"].startswith(("http:", "https:", "ws:", "wss:"))}
    assert f"{server.url}/ui/assets/ui.js" in urls and f"{server.url}/jobs/1" in urls
    assert all(u.startswith(server.url + "/") for u in urls), urls


def test_the_page_and_its_assets_need_no_token_and_carry_no_data(server: Served) -> None:
    import httpx

    page = httpx.get(server.url + "/ui")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for text in (page.text, *(httpx.get(f"{server.url}/ui/assets/{name}").text for name in ("ui.js", "ui.css"))):
        assert "http:" not in text and "https:" not in text and "@import" not in text  # nothing from elsewhere
    assert httpx.get(server.url + "/ui/assets/../pyproject.toml").status_code == 404
    assert httpx.get(server.url + "/ui/assets/nope.js").status_code == 404
