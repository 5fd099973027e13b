"""The Airflow UI as a user uses it: ``airflow standalone`` with the project's DAGs (as ``make
airflow`` starts it), headless Chromium (Debian's ``chromium``) driven through Debian's
``chromedriver`` by Selenium: log in, trigger ``iadeep_experiment`` from the trigger form with
params, wait for the run to succeed, open the report, then the run's *iadeep results* tab (the
plugin of :mod:`iadeep.orchestration.plugin`): its table holds the summary's figures and its plots
load; the plugin's routes refuse a caller without a login. Screenshots are kept under pytest's
temporary folder (``.../artifacts0/``; the path is printed) as the test's artifacts.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

# a loaded 2-core machine needs minutes to start Airflow and run the DAG (idle: about 1 min in all)
pytestmark = [pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(1800)]

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def airflow_server(tmp_path_factory) -> Iterator:
    """One ``airflow standalone`` for the session (about 1 GB; healthy in 15 s on an idle machine)."""
    pytest.importorskip("airflow")
    from iadeep.orchestration._standalone import Standalone

    if os.environ.get("IADEEP_UI_AIRFLOW_HOME"):  # an already running one (make airflow)
        yield Standalone(os.environ["IADEEP_UI_AIRFLOW_HOME"], int(os.environ["IADEEP_UI_AIRFLOW_PORT"]))
        return
    root = tmp_path_factory.mktemp("airflow-standalone")
    env = {"IADEEP_CACHE_DIR": str(root / "cache"), "IADEEP_RUNS_DIR": str(root / "runs")}
    with Standalone(root / "home", env=env) as server:
        yield server


@pytest.fixture
def browser(tmp_path_factory) -> Iterator:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    for path in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(path):
            pytest.fail(f"{path} missing: `make node` installs chromium and chromium-driver (tools/node/deps.sh)")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    # All traffic stays on loopback: the flags below stop most of Chromium's own services, but
    # autofill, sign-in, password leak checks, optimisation hints and the search engine's start
    # page still look names up through the machine's resolver without it (some 190 queries a run);
    # the resolver rule answers every name but localhost and 127.0.0.1 (where the UI is) "not
    # found" inside Chromium, so no query leaves it.
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1", "--dns-prefetch-disable",
                f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)  # no Selenium Manager: offline
    driver.implicitly_wait(60)
    try:
        yield driver
    finally:
        driver.quit()


def _type(element, text: str) -> None:
    """Type ``text`` into a form field, a few keys at a time as a user would, until the field holds
    exactly it.

    The trigger form's inputs can lose a keystroke when the text arrives as one burst: with the
    suite on two workers an ``out`` path of 59 characters came back as ``.../expriment`` five times
    in a row. The field is read back and typed again in smaller pieces, so the run is triggered
    with the params the test later looks for.
    """
    from selenium.webdriver.common.keys import Keys

    for chunk in (len(text), 8, 4, 1):
        element.send_keys(Keys.CONTROL, "a")
        element.send_keys(Keys.DELETE)
        for i in range(0, len(text), chunk):
            element.send_keys(text[i:i + chunk])
            if chunk < len(text):
                time.sleep(0.05)
        time.sleep(0.2)  # the form re-renders the field from its state after the last keystroke
        if element.get_attribute("value") == text:
            return
    raise AssertionError(f"the form field holds {element.get_attribute('value')!r} after typing {text!r}")


def test_trigger_iadeep_experiment_from_the_form_and_open_the_report(airflow_server, browser, tmp_path_factory) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    artifacts = tmp_path_factory.mktemp("artifacts")
    print(f"screenshots: {artifacts}")
    shot = lambda name: browser.save_screenshot(str(artifacts / f"{name}.png"))  # noqa: E731
    out = tmp_path_factory.mktemp("ui-run") / "experiment"
    wait = WebDriverWait(browser, 300)

    # log in (the simple auth manager's form; the password it generated for admin)
    browser.get(f"{airflow_server.url}/")
    wait.until(ec.presence_of_element_located((By.NAME, "username"))).send_keys("admin")
    browser.find_element(By.NAME, "password").send_keys(airflow_server.password)
    shot("01-login")
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(lambda d: "/auth/login" not in d.current_url)

    # the DAG's page, then its trigger form; fill params in the form's fields
    browser.get(f"{airflow_server.url}/dags/iadeep_experiment")
    wait.until(ec.element_to_be_clickable((By.CSS_SELECTOR, "button[aria-label='Trigger Dag']"))).click()
    jobs = wait.until(ec.presence_of_element_located((By.NAME, "element_jobs")))
    _type(jobs, "30")
    _type(browser.find_element(By.NAME, "element_seed"), "2")
    _type(browser.find_element(By.NAME, "element_out"), str(out))
    shot("02-trigger-form")
    submit = browser.find_elements(By.XPATH, "//*[@role='dialog']//button[normalize-space(.)='Trigger']")[-1]
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", submit)
    shot("03-trigger-button")
    submit.click()

    # the run the form created (REST API: the conf the form sent), until it is done
    deadline = time.monotonic() + 900
    run = None
    while time.monotonic() < deadline:
        runs = airflow_server.api("GET", "/dags/iadeep_experiment/dagRuns")["dag_runs"]
        mine = [r for r in runs if (r.get("conf") or {}).get("out") == str(out)]
        run = mine[0] if mine else None
        if run and run["state"] in ("success", "failed"):
            break
        time.sleep(3)
    assert run is not None, "the trigger form created no run with the given params"
    assert run["conf"]["jobs"] == 30 and run["conf"]["seed"] == 2 and run["conf"]["policies"] == ["iadeep", "exclusive",
                                                                                                   "antman", "gandiva"]
    browser.get(f"{airflow_server.url}/dags/iadeep_experiment/runs/{run['dag_run_id']}")
    time.sleep(2)
    shot("04-run")
    assert run["state"] == "success", run

    # the report: the report task's result in the UI, then report.md itself
    browser.get(f"{airflow_server.url}/dags/iadeep_experiment/runs/{run['dag_run_id']}/tasks/report/xcom")
    wait.until(lambda d: "summary.json" in d.page_source)
    shot("05-report-xcom")
    summary = json.loads((out / "summary.json").read_text())
    assert summary["trace"]["jobs"] == 30 and list(summary["policies"]) == ["iadeep", "exclusive", "antman", "gandiva"]
    browser.get((out / "report.md").as_uri())
    wait.until(lambda d: "iadeep" in d.find_element(By.TAG_NAME, "body").text)
    shot("06-report-md")
    browser.get((out / "jct_cdf.png").as_uri())
    shot("07-jct-cdf")

    # the report task links to the run's results tab (the iadeep plugin), which shows the table and the plots
    quoted = quote(run["dag_run_id"], safe="")
    value = airflow_server.api("GET", f"/dags/iadeep_experiment/dagRuns/{quoted}/taskInstances/report/xcomEntries/return_value")["value"]
    assert value["results_url"] == f"{airflow_server.url}/dags/iadeep_experiment/runs/{quoted}/plugin/iadeep-results"
    browser.get(value["results_url"])
    browser.switch_to.frame(wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "iframe[title='iadeep results']"))))
    wait.until(lambda d: len(d.find_elements(By.TAG_NAME, "img")) == 3)
    loaded = browser.execute_script("return [...document.images].map(i => i.complete && i.naturalWidth > 0)")
    rows = {cells[0]: cells[1:] for cells in ([td.text for td in tr.find_elements(By.TAG_NAME, "td")]
                                              for tr in browser.find_elements(By.CSS_SELECTOR, "tbody tr"))}
    browser.switch_to.default_content()
    shot("08-results-tab")
    assert loaded == [True, True, True], loaded
    assert {p: r[0] for p, r in rows.items()} == {p: f"{m['avg_jct_s'] / 3600:.2f}" for p, m in summary["policies"].items()}
    page = f"{airflow_server.url}/iadeep/runs/iadeep_experiment/{quoted}"
    assert httpx.get(page, timeout=60).status_code == 401  # no login, no results
    token = {"Authorization": f"Bearer {airflow_server.token()}"}
    assert httpx.get(f"{page}/files/summary.json", headers=token, timeout=60).json() == summary
    assert httpx.get(f"{page}/files/workload.csv", headers=token, timeout=60).status_code == 404  # not a result file
    assert all((artifacts / f).stat().st_size > 0 for f in os.listdir(artifacts))
