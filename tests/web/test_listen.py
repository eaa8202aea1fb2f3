"""The pure rules of where `memsync serve` listens and which names it answers to."""

from __future__ import annotations

import pytest

from memsync.errors import ConfigError
from memsync.web.listen import (
    DEFAULT_PORT,
    Listen,
    allowed_hosts,
    check_local,
    cookie_name,
    host_name,
    parse_listen,
    same_origin,
)


@pytest.mark.parametrize(
    ("text", "host", "port"),
    [
        ("127.0.0.1:9000", "127.0.0.1", 9000),
        ("0.0.0.0:80", "0.0.0.0", 80),
        ("[::1]:9000", "::1", 9000),
        ("[::]", "::", DEFAULT_PORT),
        ("Team.Example.com", "team.example.com", DEFAULT_PORT),
        (":9000", "127.0.0.1", 9000),
    ],
)
def test_listen_reads_host_and_port(text: str, host: str, port: int) -> None:
    assert parse_listen(text) == Listen(host, port)


@pytest.mark.parametrize("text", ["host:0", "host:65536", "host:http", "[::1", "[::1]9000"])
def test_a_listen_address_that_cannot_be_read_is_a_usage_error(text: str) -> None:
    with pytest.raises(ConfigError, match="--listen") as caught:
        parse_listen(text)
    assert caught.value.usage


def test_loopback_is_told_apart_and_a_wildcard_is_reached_at_loopback() -> None:
    assert parse_listen("127.0.0.2:1").loopback and parse_listen("[::1]:1").loopback
    assert parse_listen("localhost:1").loopback
    assert not parse_listen("0.0.0.0:1").loopback and not parse_listen("10.0.0.5:1").loopback
    assert parse_listen("0.0.0.0:8000").address(tls=False) == "http://127.0.0.1:8000"
    assert parse_listen("[::]:8000").address(tls=False) == "http://[::1]:8000"
    assert parse_listen("[::1]:8000").address(tls=True) == "https://[::1]:8000"
    assert str(parse_listen("[::1]:8000")) == "[::1]:8000"


def test_the_log_says_what_it_listens_on_and_where_a_browser_here_reaches_a_wildcard() -> None:
    assert parse_listen("0.0.0.0:8000").listening(tls=False) == (
        "http://0.0.0.0:8000 (every address of this machine; here http://127.0.0.1:8000)"
    )
    assert parse_listen("[::]:8000").listening(tls=True) == (
        "https://[::]:8000 (every address of this machine; here https://[::1]:8000)"
    )
    assert parse_listen("10.0.0.5:80").listening(tls=False) == "http://10.0.0.5:80"


@pytest.mark.parametrize("text", ["127.0.0.1:9000", "localhost", "0.0.0.0:80", "[::]:80"])
def test_an_address_of_this_machine_is_accepted(text: str) -> None:
    check_local(parse_listen(text))


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("nonsense:9000", "there is no host named nonsense"),
        ("192.0.2.1:9000", "192.0.2.1 is not an address of this machine"),  # TEST-NET-1
    ],
)
def test_a_host_this_machine_does_not_have_is_a_usage_error(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as caught:
        check_local(parse_listen(text))
    assert caught.value.usage and str(caught.value).startswith(f"--listen {parse_listen(text)}: ")


def test_the_hosts_a_request_may_name() -> None:
    hosts = allowed_hosts(parse_listen("10.0.0.5:80"), ("Memory.Example.com", "[fd00::1]"))
    assert hosts == {"localhost", "127.0.0.1", "::1", "10.0.0.5", "memory.example.com", "fd00::1"}
    assert "0.0.0.0" not in allowed_hosts(parse_listen("0.0.0.0:80"), ())
    assert host_name("LocalHost:8631") == "localhost"
    assert host_name("[::1]:8631") == "::1"
    assert host_name("example.com") == "example.com"


@pytest.mark.parametrize(
    ("origin", "host", "same"),
    [
        ("http://127.0.0.1:8631", "127.0.0.1:8631", True),
        ("http://localhost:8631", "127.0.0.1:8631", False),  # another name: another site
        ("http://127.0.0.1:3000", "127.0.0.1:8631", False),  # another port: another site
        ("https://memory.example.com", "memory.example.com", True),  # behind a TLS proxy
        ("https://memory.example.com:443", "memory.example.com", True),
        ("http://memory.example.com", "memory.example.com:8631", False),
        ("null", "127.0.0.1:8631", False),
        ("file://", "127.0.0.1:8631", False),
        ("http://127.0.0.1:x", "127.0.0.1:8631", False),
    ],
)
def test_an_origin_must_name_the_host_and_port_the_request_went_to(
    origin: str, host: str, same: bool
) -> None:
    assert same_origin(origin, host) is same


def test_the_session_cookie_is_named_after_the_port() -> None:
    assert cookie_name(8631) != cookie_name(8632)
