"""The search page in a real headless Chromium (Debian's chromium and chromium-driver, which
.ci/run installs), over a real uvicorn on 127.0.0.1: searching with filters, opening a result,
a note holding markup shown as text, and the page working with JavaScript off."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from test_page import MARKUP, indexed_sample

from memsync.config import Config

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not Path(CHROMIUM).is_file():
    pytest.skip(
        "no chromium binary: apt-get install chromium chromium-driver (as .ci/run does)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402 - only where a browser exists
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402


class Served:
    """The page's app on a real uvicorn in a process of its own, on a socket bound here to a free
    port of 127.0.0.1 (listening before the server starts: no wait, no race)."""

    def __init__(self, config: Config) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen()
        code = (
            "import socket, sys, uvicorn\n"
            "from memsync.config import load_config\n"
            "from test_page import page_app\n"
            "app = page_app(load_config(db=sys.argv[1], provider='none'))\n"
            "server = uvicorn.Server(uvicorn.Config(app, log_level='warning', lifespan='off'))\n"
            "server.run(sockets=[socket.socket(fileno=int(sys.argv[2]))])\n"
        )
        fd = self.socket.fileno()
        self.process = subprocess.Popen(
            [sys.executable, "-c", code, str(config.db), str(fd)],
            pass_fds=[fd],
            cwd=Path(__file__).parent,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}"

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.socket.close()


def chromium(profile: Path, javascript: bool = True) -> webdriver.Chrome:
    """Headless Chromium that reaches 127.0.0.1 only (the page must need nothing from
    elsewhere); the driver's path is given, so Selenium Manager never runs to download one."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # the tests run as root in CI, where Chromium's sandbox refuses to start
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=CHROMEDRIVER, log_output=subprocess.DEVNULL)
    return webdriver.Chrome(options=options, service=service)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    server = Served(indexed_sample(tmp_path_factory.mktemp("browser")))
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[webdriver.Chrome]:
    driver = chromium(tmp_path_factory.mktemp("profile"))
    yield driver
    driver.quit()


def _locations(driver: webdriver.Chrome) -> list[str]:
    return [link.text for link in driver.find_elements(By.CSS_SELECTOR, "ol.results .where a")]


def _no_alert(driver: webdriver.Chrome) -> None:
    with pytest.raises(NoAlertPresentException):
        driver.switch_to.alert.text  # noqa: B018 - reading it is what raises


def _console_errors(driver: webdriver.Chrome) -> list[str]:
    """What the page logged at error level: a blocked stylesheet (CSP), a missing asset."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def test_a_search_with_filters_lists_the_notes_lines_and_scores(
    served: Served, browser: webdriver.Chrome
) -> None:
    browser.get(served.url + "/")
    assert "notes indexed" in browser.find_element(By.CSS_SELECTOR, ".status").text
    browser.find_element(By.NAME, "q").send_keys("postgres")
    browser.find_element(By.NAME, "path").send_keys("daily/")
    browser.find_element(By.NAME, "until").send_keys("2026-10-15")
    Select(browser.find_element(By.NAME, "mode")).select_by_value("keyword")
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    asked = parse_qs(urlsplit(browser.current_url).query)
    assert asked["q"] == ["postgres"] and asked["path"] == ["daily/"]
    assert asked["until"] == ["2026-10-15"] and asked["mode"] == ["keyword"]
    assert _locations(browser) == ["daily/2026-10-02.md:1-7", "daily/2026-10-02.md:8-9"]
    first = browser.find_element(By.CSS_SELECTOR, "ol.results li")
    assert float(first.find_element(By.CSS_SELECTOR, ".score").text) > 0
    assert "postgres" in first.find_element(By.CSS_SELECTOR, "pre.snippet mark").text.lower()
    assert browser.find_element(By.NAME, "path").get_attribute("value") == "daily/"
    assert _console_errors(browser) == []


def test_opening_a_result_shows_the_note_with_its_lines_marked(
    served: Served, browser: webdriver.Chrome
) -> None:
    browser.get(served.url + "/?q=postgres&tag=incident")
    link = browser.find_element(By.CSS_SELECTOR, "ol.results .where a")
    path, _, lines = link.text.partition(":")
    first, last = (int(n) for n in lines.split("-"))
    link.click()
    assert browser.find_element(By.TAG_NAME, "h1").text == path
    marked = browser.find_elements(By.CSS_SELECTOR, "pre.note .hit")
    assert [m.get_attribute("id") for m in marked] == [f"L{n}" for n in range(first, last + 1)]
    assert urlsplit(browser.current_url).fragment == f"L{first}"
    # the stylesheet arrived under the page's own policy: the marked lines have its background
    plain = browser.find_element(By.CSS_SELECTOR, "pre.note .line:not(.hit)")
    assert marked[0].value_of_css_property("background-color") != plain.value_of_css_property(
        "background-color"
    )
    assert _console_errors(browser) == []


def test_a_note_holding_markup_shows_it_as_text_and_runs_nothing(
    served: Served, browser: webdriver.Chrome
) -> None:
    browser.get(served.url + "/?q=bold+script")
    snippet = browser.find_element(By.CSS_SELECTOR, "ol.results pre.snippet")
    assert "<script>alert(1)</script> and <b>bold</b>" in snippet.text
    assert browser.find_elements(By.CSS_SELECTOR, "pre b, pre script") == []
    _no_alert(browser)
    browser.find_element(By.CSS_SELECTOR, "ol.results .where a").click()
    assert MARKUP in browser.find_element(By.CSS_SELECTOR, "pre.note").text
    assert browser.find_elements(By.CSS_SELECTOR, "pre b, pre script") == []
    _no_alert(browser)


def test_the_page_works_with_javascript_off(served: Served, tmp_path: Path) -> None:
    driver = chromium(tmp_path / "profile", javascript=False)
    try:
        driver.get(served.url + "/")
        driver.find_element(By.NAME, "q").send_keys("replication")
        driver.find_element(By.NAME, "path").send_keys("tech/")
        driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
        assert _locations(driver)[0] == "tech/postgres-replication.md:1-11"
        driver.find_element(By.CSS_SELECTOR, "ol.results .where a").click()
        assert [m.get_attribute("id") for m in driver.find_elements(By.CSS_SELECTOR, ".hit")] == [
            f"L{n}" for n in range(1, 12)
        ]
    finally:
        driver.quit()


def test_a_bad_date_is_shown_on_the_page(served: Served, browser: webdriver.Chrome) -> None:
    browser.get(served.url + "/?q=postgres&since=someday")
    alert = browser.find_element(By.CSS_SELECTOR, "p.error")
    assert alert.text.startswith("memsync: error: --since: 'someday' is not a date")
