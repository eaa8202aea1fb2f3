"""The search page of a real `memsync serve` on 127.0.0.1, in a real headless Chromium (Debian's
chromium and chromium-driver, which .ci/run installs): logging in with the token in the first
address or with the login form, searching with filters, opening a result, a note holding markup
shown as text and run never, refused without a token, all of it with JavaScript off, and the
session never handed to another server of this host."""

from __future__ import annotations

import contextlib
import http.server
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest

from memsync.web.prefix import page_prefix
from tests.conftest import MCP_HELLO, SAMPLE_VAULT, VaultIndexer, write
from tests.web.test_page import MARKUP

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
    `memsync index`, all with the home `home` (this module's: one server for its tests); `token`
    is a read token."""

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
        VaultIndexer(home)(vault, db=db, host=socket.gethostname(), env=self.env)
        self.token = self.memsync("token", "add", "browser").strip()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.page = f"{self.url}{page_prefix(home / 'memsync')}/"  # as serve prints it
        self.cookie = f"memsync_session_{port}"
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
    driver.get(f"{served.page}login?token={served.token}")
    assert driver.current_url == served.page  # the address lost the token
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
    browser.get(served.page)
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
    browser.get(served.page + "?q=postgres&tag=incident")
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


def test_a_note_s_view_lists_its_related_notes_then_its_links_and_backlinks(
    served: Served, browser: webdriver.Chrome
) -> None:
    browser.get(served.page + "note?location=projects/heron.md")
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "main h2")]
    assert headings == ["Related notes", "Links", "Backlinks"]
    related = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "section.related .where a")]
    assert related and not any(r.startswith("projects/heron.md") for r in related)
    assert "keyword only" in browser.find_element(By.CSS_SELECTOR, "section.related").text
    lists = browser.find_elements(By.CSS_SELECTOR, "section.links ul")
    assert [a.text for a in lists[0].find_elements(By.TAG_NAME, "a")] == [
        "[[li-wei]]",
        "[[maya-chen]]",
        "[[heron-同步设计]]",
    ]
    backlinks = [a.text for a in lists[1].find_elements(By.TAG_NAME, "a")]
    assert backlinks == [
        "Home.md:6",
        "MEMORY.md:16",
        "people/li-wei.md:9",
        "笔记/heron-同步设计.md:13",
    ]
    _follow(browser, "section.related .where a")
    assert browser.find_element(By.TAG_NAME, "h1").text == related[0].partition(":")[0]
    assert _console_errors(browser) == []


def test_a_note_holding_markup_shows_it_as_text_and_runs_nothing(
    served: Served, browser: webdriver.Chrome
) -> None:
    browser.get(served.page + "?q=bold+script")
    snippet = browser.find_element(By.CSS_SELECTOR, "ol.results pre.snippet")
    assert "<script>alert(1)</script> and <b>bold</b>" in snippet.text
    assert browser.find_elements(By.CSS_SELECTOR, "pre b, pre script") == []
    _no_alert(browser)
    _follow(browser, "ol.results .where a")
    assert MARKUP in browser.find_element(By.CSS_SELECTOR, "pre.note").text
    assert browser.find_elements(By.CSS_SELECTOR, "pre b, pre script") == []
    _no_alert(browser)


def test_refused_without_a_token_then_logged_in_by_the_form_it_works_with_javascript_off(
    served: Served, tmp_path: Path
) -> None:
    driver = chromium(tmp_path / "profile", javascript=False)
    try:
        driver.get(f"{served.url}/")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Not Found"
        assert "memsync serve printed" in driver.find_element(By.TAG_NAME, "main").text
        driver.get(f"{served.page}?q=postgres")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Log in"
        assert driver.find_elements(By.CSS_SELECTOR, "ol.results") == []
        driver.find_element(By.NAME, "token").send_keys(served.token)
        _follow(driver, "form.login button[type=submit]")
        assert driver.current_url == served.page
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
    browser.get(served.page + "?q=postgres&since=someday")
    alert = browser.find_element(By.CSS_SELECTOR, "p.error")
    assert alert.text.startswith("memsync: error: --since: 'someday' is not a date")


class Recorder(http.server.ThreadingHTTPServer):
    """Another server of this host (another user's, any local app): it answers every address
    with a page and keeps the Cookie header of each request, to replay it."""

    daemon_threads = False  # its close waits for them: none outlives the test
    block_on_close = True

    def __init__(self, sets: str = "") -> None:
        self.seen: list[tuple[str, str]] = []  # (path, Cookie header)
        recorder = self

        class Handler(http.server.BaseHTTPRequestHandler):
            timeout = 10  # a connection the browser opened ahead and never used ends too

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                recorder.seen.append((self.path, self.headers.get("Cookie", "")))
                body = b"<!doctype html><title>elsewhere</title><p>another server</p>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                if sets:
                    self.send_header("Set-Cookie", sets)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"


@contextlib.contextmanager
def another_server(sets: str = "") -> Iterator[Recorder]:
    """Another server of this host; `sets` a cookie with each page, if given."""
    server = Recorder(sets)
    thread = threading.Thread(target=server.serve_forever)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def test_another_server_of_this_host_never_gets_the_session_nor_reads_with_what_it_got(
    served: Served, browser: webdriver.Chrome
) -> None:
    """Browsers send a host's cookies to all of its ports: bound to the page's folder, the
    session reaches no other server's address, and at /api and /mcp it is refused anyway."""
    browser.get(served.page)
    session = next(c for c in browser.get_cookies() if c["name"] == served.cookie)
    assert session["path"] == urlsplit(served.page).path and session["httpOnly"]
    guesses = ["/", "/api/search?q=postgres", "/mcp", "/memsync/", "/login", "/assets/page.css"]
    with another_server() as elsewhere:
        for path in guesses:
            browser.get(elsewhere.url + path)
            assert browser.find_element(By.TAG_NAME, "p").text == "another server"
    assert [path for path, _ in elsewhere.seen if path != "/favicon.ico"] == guesses
    assert all(served.cookie not in cookie for _, cookie in elsewhere.seen), elsewhere.seen
    mcp_headers = {"Accept": "application/json, text/event-stream"}
    # what it got, and even the session itself, read and write nothing through the API or MCP
    for cookie in {cookie for _, cookie in elsewhere.seen} | {
        f"{served.cookie}={session['value']}"
    }:
        replayed = {"Cookie": cookie, "Origin": served.url}
        search = httpx2.get(f"{served.url}/api/search?q=postgres", headers=replayed)
        mcp = httpx2.post(f"{served.url}/mcp", json=MCP_HELLO, headers={**replayed, **mcp_headers})
        assert (search.status_code, mcp.status_code) == (401, 401), cookie
        assert "postgres" not in search.text.lower() and "mcp-session-id" not in mcp.headers


def test_a_cookie_another_server_sets_under_the_session_s_name_logs_nobody_out(
    served: Served, tmp_path: Path
) -> None:
    """Any other server of this host may set a cookie of the session's name for "/" (cookies
    ignore ports), which the browser sends beside the page's own from then on: the page's own
    still opens the page, and a login after it still logs in."""
    tossed = f"{served.cookie}=tossed; Path=/"
    for order, profile in (("before", "a"), ("after", "b")):
        driver = chromium(tmp_path / profile)
        try:
            if order == "after":
                driver.get(f"{served.page}login?token={served.token}")
            with another_server(sets=tossed) as elsewhere:
                driver.get(elsewhere.url + "/")
            if order == "before":
                driver.get(f"{served.page}login?token={served.token}")
            driver.get(f"{served.page}?q=postgres")
            assert driver.find_elements(By.CSS_SELECTOR, "form.login") == [], order
            assert _locations(driver), order
        finally:
            driver.quit()
