"""Open a report in headless Chromium (Debian's package, installed by .ci/run) and read it back."""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@dataclass
class Page:
    title: str
    errors: list[str]  # console messages at SEVERE level
    curves: dict[str, int]  # metric -> polylines.curve in its chart
    rewards: dict[str, list[str]]  # run dir -> the data-reward of each polyline.curve in its rewards chart
    rows: int  # ranked table rows
    flags: int  # health panel items
    envs: dict[str, list[str]]  # env task -> the data-series of each polyline.curve in its panel


def open_report(path: Path) -> Page:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    assert Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists(), "install chromium chromium-driver (.ci/run)"
    profile = tempfile.mkdtemp(prefix="rlexp-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get(path.resolve().as_uri())
        # Hovering a table row runs the page's script; errors would show in the console log.
        rows = driver.find_elements(By.CSS_SELECTOR, "tr.run-row")
        if rows:
            webdriver.ActionChains(driver).move_to_element(rows[0]).perform()
        curves = {
            fig.get_attribute("data-metric"): len(fig.find_elements(By.CSS_SELECTOR, "polyline.curve"))
            for fig in driver.find_elements(By.CSS_SELECTOR, "figure.chart:not(.rewards-chart):not(.env-task)")
        }
        rewards = {
            fig.get_attribute("data-run"): [
                el.get_attribute("data-reward") for el in fig.find_elements(By.CSS_SELECTOR, "polyline.curve")
            ]
            for fig in driver.find_elements(By.CSS_SELECTOR, "figure.rewards-chart")
        }
        envs = {
            fig.get_attribute("data-task"): [
                el.get_attribute("data-series") for el in fig.find_elements(By.CSS_SELECTOR, "polyline.curve")
            ]
            for fig in driver.find_elements(By.CSS_SELECTOR, "figure.env-task")
        }
        page = Page(
            title=driver.title,
            errors=[e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"],
            curves=curves,
            rewards=rewards,
            rows=len(rows),
            flags=len(driver.find_elements(By.CSS_SELECTOR, "#health li")),
            envs=envs,
        )
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    return page
