"""Where `memsync serve` listens and which names it answers to: pure rules over `--listen`,
`--allow-host`, the Host and Origin headers, the session cookie's name and the login address;
and one look-up, whether the --listen host is this machine's."""

from __future__ import annotations

import errno
import ipaddress
import socket
import urllib.parse
from dataclasses import dataclass

from ..errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8631  # documented in docs/serving.md: clients' configurations name it
LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
WILDCARDS = {"0.0.0.0": DEFAULT_HOST, "::": "::1"}  # every address -> the one a browser here opens
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Listen:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    @property
    def family(self) -> socket.AddressFamily:
        return socket.AF_INET6 if ":" in self.host else socket.AF_INET

    def address(self, tls: bool) -> str:
        """The address a browser on this machine opens; a wildcard host is reached at loopback."""
        shown = str(Listen(WILDCARDS.get(self.host, self.host), self.port))
        return f"{'https' if tls else 'http'}://{shown}"

    def listening(self, tls: bool) -> str:
        """What the log says it listens on: the address itself, and for a wildcard (every
        address of this machine) the one a browser here opens."""
        scheme = "https" if tls else "http"
        if self.host in WILDCARDS:
            return f"{scheme}://{self} (every address of this machine; here {self.address(tls)})"
        return self.address(tls)


def parse_listen(text: str) -> Listen:
    """HOST:PORT, [IPV6]:PORT, HOST (the default port) or :PORT (on loopback)."""
    host, port = text.strip(), str(DEFAULT_PORT)
    if host.startswith("["):
        inside, bracket, rest = host[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise ConfigError(f"--listen {text}: write an IPv6 address as [::1]:PORT", usage=True)
        host, port = inside, rest[1:] or port
    elif host.count(":") == 1:
        host, port = host.split(":")
    host = host or DEFAULT_HOST
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--listen {text}: the port must be a number 1-65535", usage=True)
    return Listen(host.lower(), int(port))


def check_local(listen: Listen) -> None:
    """A usage error unless the --listen host is one of this machine's (or a wildcard): looked
    up and bound to a spare port, as serve will bind it, before anything starts."""
    try:
        with socket.socket(listen.family, socket.SOCK_STREAM) as probe:
            probe.bind((listen.host, 0))
    except socket.gaierror as exc:
        raise ConfigError(
            f"--listen {listen}: there is no host named {listen.host}: give an address of this "
            f"machine (127.0.0.1, 0.0.0.0 for all of them) or a name it has",
            usage=True,
        ) from exc
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise ConfigError(
                f"--listen {listen}: {listen.host} is not an address of this machine: give one "
                f"it has (127.0.0.1, 0.0.0.0 for all of them)",
                usage=True,
            ) from exc
        # anything else (a port not allowed, say) is said by the bind itself


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts(listen: Listen, others: tuple[str, ...]) -> frozenset[str]:
    """The names a Host header may give: loopback's, the --listen host's, --allow-host's."""
    named = {listen.host} if listen.host not in WILDCARDS else set()
    return frozenset(LOOPBACK_NAMES | named | {host.strip().lower().strip("[]") for host in others})


def host_name(header: str) -> str:
    """The host of a Host header's host[:port], lower-case, an IPv6 address without brackets."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1:].partition("]")[0]
    return header.rpartition(":")[0] if header.count(":") == 1 else header


def same_origin(origin: str, host_header: str) -> bool:
    """Whether an Origin header names the very host and port the request was sent to: another
    port of the same host is another site's page, and cookies do not tell ports apart. A browser
    leaves a default port out of both (behind a TLS proxy, 443)."""
    parts = urllib.parse.urlsplit(origin.strip().lower())
    target = urllib.parse.urlsplit(f"//{host_header.strip().lower()}")
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return False  # "null", a file: page, an extension
    try:
        return parts.hostname == target.hostname and (
            parts.port or DEFAULT_PORTS[parts.scheme]
        ) == (target.port or DEFAULT_PORTS[parts.scheme])
    except ValueError:  # a port that is no number
        return False


def cookie_name(port: int) -> str:
    """The session cookie, one per port: a browser keeps one cookie jar for all of a host's ports."""
    return f"memsync_session_{port}"
