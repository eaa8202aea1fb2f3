"""`memsync serve` as a real process: it serves what it watches, stops at SIGTERM with exit 0,
says each refusal in one line, and on a terminal makes the first token and shows it once."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx2
import pytest
from click.testing import CliRunner

from memsync.cli.commands import main
from memsync.config import data_dir
from memsync.web.prefix import page_prefix
from memsync.web.tokens import Tokens
from tests.conftest import EmbeddingServer, VaultIndexer, free_port, wait_until, write


def _env(host: str = "laptop") -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith("MEMSYNC_")}
    return keep | {
        "MEMSYNC_HOME": os.environ["MEMSYNC_HOME"],
        "MEMSYNC_PROVIDER": "none",
        "MEMSYNC_HOST": host,
    }


def _vault(tmp_path: Path) -> Path:
    vault = tmp_path / "notes"
    write(vault, "tech/ssh.md", "# SSH\n\nThe test server's SSH port is 2222.\n")
    return vault


@contextlib.contextmanager
def serve(*args: str, host: str = "laptop", **popen: object) -> Iterator[subprocess.Popen[str]]:
    """`memsync serve ARGS` as a process on the machine `host` (its output piped unless `popen`
    says otherwise)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "memsync", "serve", *args],
        text=True,
        **({"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "env": _env(host)} | popen),  # type: ignore[arg-type]
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)


def _wait_until_served(url: str, token: str, process: subprocess.Popen[str]) -> httpx2.Response:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx2.TransportError):
            return httpx2.get(f"{url}/api/status", headers={"Authorization": f"Bearer {token}"})
        time.sleep(0.05)
    raise AssertionError(f"memsync serve did not answer (exit {process.poll()})")


def _wait_until_embedded(url: str, token: str) -> None:
    headers = {"Authorization": f"Bearer {token}"}

    def embedded() -> bool:
        return not httpx2.get(f"{url}/api/status", headers=headers).json()["chunks_pending"]

    wait_until(embedded, 60, "the watcher embedding the vault")


def test_serve_keeps_the_vault_fresh_and_stops_at_sigterm_with_exit_0(tmp_path: Path) -> None:
    vault, port = _vault(tmp_path), free_port()
    token = Tokens().add("agent")
    url = f"http://127.0.0.1:{port}"
    with serve(str(vault), "--listen", f"127.0.0.1:{port}") as process:
        assert _wait_until_served(url, token, process).status_code == 200
        write(vault, "tech/vpn.md", "# VPN\n\nThe VPN listens on port 1194.\n")
        headers = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 60
        found: list[object] = []
        while not found and time.monotonic() < deadline:  # the watcher indexes the new note
            answer = httpx2.get(f"{url}/api/search?q=VPN&mode=keyword", headers=headers)
            found = answer.json()["results"]
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert found and "Traceback" not in err and token not in out + err
    assert "watching" in err and err.rstrip().endswith("stopped")


def test_a_port_in_use_is_one_line_naming_listen(tmp_path: Path) -> None:
    Tokens().add("agent")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with serve(
            "--db", str(tmp_path / "none.sqlite"), "--listen", f"127.0.0.1:{port}"
        ) as process:
            out, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert err.count("\n") == 1 and err.startswith(f"memsync: error: --listen 127.0.0.1:{port}")
    assert "in use" in err


def test_without_a_terminal_and_without_a_token_serve_exits_1_naming_token_add(
    tmp_path: Path,
) -> None:
    with serve(str(_vault(tmp_path)), "--listen", f"127.0.0.1:{free_port()}") as process:
        out, err = process.communicate(timeout=60)
    assert process.returncode == 1 and out == ""
    assert err.count("\n") == 1 and "memsync token add" in err
    assert not Tokens().all()


def test_a_token_file_others_could_write_refuses_the_start_in_one_line(tmp_path: Path) -> None:
    Tokens().add("agent")
    Tokens().path.chmod(0o666)
    with serve(str(_vault(tmp_path)), "--listen", f"127.0.0.1:{free_port()}") as process:
        out, err = process.communicate(timeout=60)
    assert process.returncode == 1 and out == ""
    assert err == (
        f"memsync: error: the token file {Tokens().path} can be written by other users, who "
        f"could add tokens of their own: chmod go-w {Tokens().path}\n"
    )


@contextlib.contextmanager
def _serve_on_a_terminal(
    vault: Path, port: int, shown_once: Callable[[str], bool]
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`memsync serve VAULT` with a terminal for its stdin and stdout: the process, and what it
    showed there by the time `shown_once` holds (at most a minute)."""
    main_fd, terminal = pty.openpty()
    try:
        with serve(
            str(vault),
            "--listen",
            f"127.0.0.1:{port}",
            stdin=terminal,
            stdout=terminal,
            stderr=subprocess.PIPE,
        ) as process:
            os.close(terminal)
            shown = ""
            deadline = time.monotonic() + 60
            while not shown_once(shown) and time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    shown += os.read(main_fd, 4096).decode()
            yield process, shown
    finally:
        os.close(main_fd)


def test_the_first_serve_on_a_terminal_makes_a_token_and_shows_it_once(tmp_path: Path) -> None:
    port = free_port()
    with _serve_on_a_terminal(_vault(tmp_path), port, lambda shown: "?token=" in shown) as (
        process,
        shown,
    ):
        login = re.search(
            r"(http://127\.0\.0\.1:\d+(/[\w-]{22,}/)login\?token=(memsync_\S+))", shown
        )
        assert login, shown
        page = login.group(2)
        assert page == page_prefix(data_dir()) + "/"
        secret = login.group(3)
        assert shown.count(secret) == 2  # alone on its line, and in the login address
        token = Tokens().verify(secret)
        assert token is not None and token.name == "default" and not token.writes
        _wait_until_served(f"http://127.0.0.1:{port}", secret, process)
        with httpx2.Client() as browser:
            opened = browser.get(login.group(1))
            assert opened.status_code == 303 and opened.headers["location"] == page
            assert browser.get(f"http://127.0.0.1:{port}{page}").status_code == 200
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0 and secret not in err


def test_a_later_serve_on_a_terminal_prints_the_page_s_address_and_no_token(
    tmp_path: Path,
) -> None:
    token, port = Tokens().add("agent"), free_port()
    with _serve_on_a_terminal(_vault(tmp_path), port, lambda shown: shown.endswith("\n")) as (
        process,
        shown,
    ):
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=30)
    page = f"http://127.0.0.1:{port}{page_prefix(data_dir())}/"
    assert shown.splitlines() == [f"memsync: the search page: {page}"]
    assert token not in shown


def test_another_address_than_loopback_is_said_to_carry_tokens_in_clear_text(
    tmp_path: Path,
) -> None:
    token = Tokens().add("agent")
    port = free_port()
    with serve(str(_vault(tmp_path)), "--listen", f"0.0.0.0:{port}") as process:
        _wait_until_served(f"http://127.0.0.1:{port}", token, process)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    served = [line for line in err.splitlines() if "serving" in line]
    assert len(served) == 1 and served[0].endswith(
        f"on http://0.0.0.0:{port} (every address of this machine; here http://127.0.0.1:{port}) "
        "(read-only)"
    )
    warning = [line for line in err.splitlines() if "clear text" in line]
    assert warning == [
        f"memsync: --listen 0.0.0.0:{port} is reachable from the network, and tokens travel in "
        "clear text without --tls-cert (or a TLS proxy in front)"
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "give VAULT"),
        (["--db", "x.sqlite", "--tls-cert", "c.pem"], "--tls-cert and --tls-key go together"),
        (["--db", "x.sqlite", "--listen", "127.0.0.1:http"], "--listen"),
        (["--db", "x.sqlite", "--listen", "nonsense"], "--listen nonsense:8631: there is no host"),
        (["--db", "x.sqlite", "--listen", "192.0.2.1:9"], "192.0.2.1 is not an address of this"),
    ],
)
def test_serve_s_usage_errors_exit_2(args: list[str], message: str) -> None:
    """Each decided before anything starts: no token is made, no index opened."""
    done = CliRunner().invoke(main, ["serve", *args])
    assert done.exit_code == 2 and message in done.output
    assert [line for line in done.output.splitlines() if line.startswith("Error:")] == [
        next(line for line in done.output.splitlines() if message in line)
    ]
    assert not Tokens().path.exists()


def test_without_the_mcp_extra_serve_says_what_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "uvicorn" else real(name, *a)
    )
    done = CliRunner().invoke(main, ["serve", str(_vault(tmp_path))])
    assert done.exit_code == 1
    assert done.output == (
        "memsync: error: memsync serve needs the MCP SDK (uvicorn is missing): "
        "pip install 'mcp>=2.3,<3'\n"
    )


def test_serve_db_alone_serves_a_shared_vault_from_another_machine_reading_only(
    tmp_path: Path, pg_vault: tuple[str, str], indexed_vault: VaultIndexer
) -> None:
    url, name = pg_vault
    vault = indexed_vault(_vault(tmp_path), db=url, flags=("--name", name), host="laptop")
    token, port = Tokens().add("team"), free_port()
    base = f"http://127.0.0.1:{port}"
    shared = ("--db", url, "--name", name, "--listen", f"127.0.0.1:{port}")
    with serve(*shared, "--writable", host="teamserver") as refused:
        _, err = refused.communicate(timeout=60)
    assert refused.returncode == 1 and err.count("\n") == 1
    assert "--writable" in err and "not on teamserver" in err
    write(vault, "tech/new.md", "# New\n\nWritten after the index.\n")
    with serve(*shared, host="teamserver") as process:
        headers = {"Authorization": f"Bearer {token}"}
        assert _wait_until_served(base, token, process).status_code == 200
        found = httpx2.get(f"{base}/api/search?q=ssh+port&mode=keyword", headers=headers).json()
        lines = httpx2.get(f"{base}/api/get?location=tech/ssh.md:3", headers=headers).json()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert found["results"][0]["path"] == "tech/ssh.md"
    assert lines["text"].endswith("2222.") and lines["copy"].startswith("the indexed copy")
    status = json.loads(
        CliRunner().invoke(main, ["status", "--db", url, "--name", name, "--json"]).output
    )
    assert status["files_indexed"] == 1  # the new note waits for the vault's own writer


def test_sigterm_lets_a_request_in_flight_finish_then_exits_0(
    tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault, port = _vault(tmp_path), free_port()
    provider = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    token, base = Tokens().add("agent"), f"http://127.0.0.1:{port}"
    env = _env() | provider | {"MEMSYNC_PROVIDER": "openai", "MEMSYNC_QUERY_TIMEOUT": "120"}
    with serve(str(vault), "--listen", f"127.0.0.1:{port}", env=env) as process:
        _wait_until_served(base, token, process)
        _wait_until_embedded(base, token)  # else the watcher's request passes for the question's
        embedding_server.delay = 120  # the question's embedding waits until `closing` is set
        answers: list[httpx2.Response] = []
        asking = threading.Thread(
            target=lambda: answers.append(
                httpx2.get(
                    f"{base}/api/search?q=ssh+port",
                    headers={"Authorization": f"Bearer {token}"},
                    timeout=120,
                )
            )
        )
        asking.start()
        wait_until(lambda: embedding_server.in_flight, 60, "the question's embedding request")
        process.send_signal(signal.SIGTERM)
        wait_until(lambda: not _accepts(port), 60, "serve stopping: it listens no more")
        embedding_server.closing.set()
        asking.join()
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert answers[0].status_code == 200 and answers[0].json()["results"], answers[0].text


def _accepts(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _self_signed(folder: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, as PEM files."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert, private = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert, private


def test_tls_serves_https_with_a_secure_cookie_and_a_bad_certificate_is_one_line(
    tmp_path: Path,
) -> None:
    cert, key = _self_signed(tmp_path)
    token, port = Tokens().add("agent"), free_port()
    tls = ("--tls-cert", str(cert), "--tls-key", str(key))
    with serve(str(_vault(tmp_path)), "--listen", f"127.0.0.1:{port}", *tls) as process:
        with httpx2.Client(verify=ssl.create_default_context(cafile=cert)) as browser:
            wait_until(lambda: _accepts(port) or process.poll() is not None, 60, "serve listening")
            page = f"https://127.0.0.1:{port}{page_prefix(data_dir())}/"
            login = browser.get(f"{page}login?token={token}")
            status = browser.get(page)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert login.status_code == 303 and "Secure" in login.headers["set-cookie"]
    assert status.status_code == 200 and "clear text" not in err
    key.write_text("not a key")
    with serve(str(_vault(tmp_path)), "--listen", f"127.0.0.1:{port}", *tls) as process:
        _, err = process.communicate(timeout=60)
    assert process.returncode == 1 and err.count("\n") == 1
    assert err.startswith("memsync: error: --tls-cert/--tls-key: cannot load them")
