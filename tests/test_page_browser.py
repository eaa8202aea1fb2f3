"""The search page of a real `memsync serve` on 127.0.0.1, in a real headless Chromium (Debian's
chromium and chromium-driver, which .ci/run installs): logging in with the token in the first
address, searching with filters, opening a result, a note holding markup shown as text and run
never, refused without a token, and all of it with JavaScript off."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from conftest import SAMPLE_VAULT, write
from test_page import MARKUP

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
from selenium.webdriver.support.expected_conditions import staleness_of  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402


class Served:
    """A real `memsync serve` over sample_vault and a note holding markup, indexed keyword-only by
    `memsync index`, in processes whose home is `home` (this module's: one server for its tests);
    `token` is a read token."""

    def __init__(self, home: Path, glossary: Path) -> None:
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")} | {
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "XDG_DATA_HOME": str(home / "data"),
            "MEMSYNC_HOME": str(home / "memsync"),
            "MEMSYNC_PROVIDER": "none",
        }
        (home / "memsync").mkdir()
        (home / "memsync" / glossary.name).symlink_to(glossary)  # built once for the session
        vault = home / "vault"
        shutil.copytree(SAMPLE_VAULT, vault)
        write(vault, "markup.md", f"# Markup\n\n{MARKUP}\n")
        db = str(home / "index.sqlite")
        self.memsync("index", str(vault), "--db", db)
        self.token = self.memsync("token", "add", "browser").strip()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = (home / "serve.log").open("w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "memsync", "serve", "--db", db, "--listen", f"127.0.0.1:{port}"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while self.process.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                return
            time.sleep(0.05)
        self.close()
        raise AssertionError(f"memsync serve did not start: {(home / 'serve.log').read_text()}")

    def memsync(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "memsync", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
        return done.stdout

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


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
def served(tmp_path_factory: pytest.TempPathFactory, built: Path) -> Iterator[Served]:
    server = Served(tmp_path_factory.mktemp("serve"), built)
    yield server
    server.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory, served: Served) -> Iterator[webdriver.Chrome]:
    """Chromium logged in as `memsync serve` prints it: the token in the first address."""
    driver = chromium(tmp_path_factory.mktemp("profile"))
    driver.get(f"{served.url}/?token={served.token}")
    assert urlsplit(driver.current_url).query == ""  # the address lost the token
    yield driver
    driver.quit()


def _follow(driver: webdriver.Chrome, selector: str) -> None:
    """Click what `selector` finds and wait for the page it leads to (a busy machine may still
    show the old one when the click returns)."""
    old = driver.find_element(By.TAG_NAME, "html")
    driver.find_element(By.CSS_SELECTOR, selector).click()
    WebDriverWait(driver, 60).until(staleness_of(old))


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
    _follow(browser, "button[type=submit]")
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
    _follow(browser, "ol.results .where a")
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
    _follow(browser, "ol.results .where a")
    assert MARKUP in browser.find_element(By.CSS_SELECTOR, "pre.note").text
    assert browser.find_elements(By.CSS_SELECTOR, "pre b, pre script") == []
    _no_alert(browser)


def test_refused_without_a_token_then_logged_in_it_works_with_javascript_off(
    served: Served, tmp_path: Path
) -> None:
    driver = chromium(tmp_path / "profile", javascript=False)
    try:
        driver.get(f"{served.url}/?q=postgres")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Unauthorized"
        assert "?token=" in driver.find_element(By.TAG_NAME, "main").text
        assert driver.find_elements(By.CSS_SELECTOR, "ol.results") == []
        driver.get(f"{served.url}/?token={served.token}")
        driver.find_element(By.NAME, "q").send_keys("replication")
        driver.find_element(By.NAME, "path").send_keys("tech/")
        _follow(driver, "button[type=submit]")
        assert _locations(driver)[0] == "tech/postgres-replication.md:1-11"
        _follow(driver, "ol.results .where a")
        assert [m.get_attribute("id") for m in driver.find_elements(By.CSS_SELECTOR, ".hit")] == [
            f"L{n}" for n in range(1, 12)
        ]
    finally:
        driver.quit()


def test_a_bad_date_is_shown_on_the_page(served: Served, browser: webdriver.Chrome) -> None:
    browser.get(served.url + "/?q=postgres&since=someday")
    alert = browser.find_element(By.CSS_SELECTOR, "p.error")
    assert alert.text.startswith("memsync: error: --since: 'someday' is not a date")
