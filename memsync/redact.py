"""URLs and PostgreSQL connection strings as they may be shown: printed, logged or stored without
a password, an API key or any part that could hold one.

A URL is cut by hand, not by urllib: libpq takes an unencoded `#`, `?` or `[` in a password as
part of it, where urllib would start a fragment, a query or an IPv6 address there.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

HIDDEN = "***"
UNREADABLE = "<a connection string that cannot be shown>"
# query parameters and libpq keywords that hold a secret: left out of what is shown
SECRET_KEYS = frozenset(
    "password sslpassword api_key apikey api-key key token access_token secret client_secret sig "
    "signature".split()
)
# the libpq keywords a key=value connection string starts with (no SQLite file's name does)
LIBPQ_KEYWORDS = frozenset(
    "host hostaddr port dbname user password passfile service options sslmode sslrootcert sslcert "
    "sslkey sslpassword connect_timeout application_name target_session_attrs require_auth "
    "channel_binding gssencmode krbsrvname load_balance_hosts client_encoding keepalives".split()
)
# one libpq key=value pair: a value in single quotes, or a run without white space; a backslash
# escapes the next character in both
_PAIR = re.compile(
    r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"
    r"('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)(?:[^\s\\]|\\.)*)(?=\s|$)"
)
_KEYWORD = re.compile(r"\s*([A-Za-z_]+)\s*=")
_UNESCAPE = re.compile(r"\\(.)")
# a token a server's error body spells out: `Bearer ...`, `"api_key": "..."`
_SPELLED_OUT = re.compile(r"(?i)(bearer\s+|api[_-]?key[\"':=\s]+)[A-Za-z0-9._~+/=-]{8,}")

_PASSWORDS: set[str] = set()  # every secret seen in a URL, scrubbed from any message


@dataclass(frozen=True)
class Redacted:
    """A URL or connection string as it may be shown, and what was taken out of it."""

    without_secrets: str
    certain: bool = True  # False: it could not be cut with certainty, so little of it is shown
    user: str | None = None  # a URL's user name and password, percent-decoded
    password: str | None = None
    secrets: tuple[tuple[str, str], ...] = ()  # the secret query parameters left out


def redact(text: str) -> str:
    """The URL or key=value connection string without its password (user info, `password=`,
    API keys), safe to print, log or store, and where it could be cut with certainty still one
    that can be pasted back."""
    return redacted(text).without_secrets


def redact_login(text: str) -> str:
    """redact(), the user name hidden too: for a URL an error says cannot be read, where what
    reads as a user name may be a token, or part of a password cut at the wrong place."""
    shown = redacted(text)
    if shown.user is None:
        return shown.without_secrets
    scheme, _, rest = shown.without_secrets.partition("://")
    return f"{scheme}://{HIDDEN}@{rest.partition('@')[2]}"


def redacted(text: str) -> Redacted:
    """What redact() shows, whether it is certain, and the credentials it took out."""
    if is_conninfo(text):
        return _conninfo(text)
    scheme, sep, rest = text.partition("://")
    if not sep:
        return Redacted(HIDDEN, certain=False) if "@" in text else Redacted(text)
    return _url(scheme, rest)


def is_conninfo(text: str) -> bool:
    """A libpq `key=value` connection string (`host=db user=ana dbname=notes`)?"""
    first = _KEYWORD.match(text)
    return first is not None and first.group(1) in LIBPQ_KEYWORDS


def _url(scheme: str, rest: str) -> Redacted:
    """The user info ends at the last `@` when one `@` precedes any `/`, `?` or `#`; with more
    (an unencoded `@`, `/`, `?` or `#` in a password) everything up to the last `@` is hidden, and
    the whole URL when a query may hold that `@`."""
    user = password = None
    head = ""
    certain = True
    if "@" in rest:
        userinfo, _, rest = rest.rpartition("@")
        quoted_user, colon, quoted_password = userinfo.partition(":")
        if "@" not in userinfo and not any(c in userinfo for c in "/?#"):
            user = urllib.parse.unquote(quoted_user)
            password = urllib.parse.unquote(quoted_password) if colon else None
            head = f"{quoted_user}@"
        elif "=" in userinfo:  # the `@` may sit in a query's value: a password's, for all we know
            return Redacted(f"{scheme}://{HIDDEN}", certain=False)
        else:
            head, certain = f"{HIDDEN}@", False
        _remember(quoted_password)
    path, question, query = rest.partition("?")
    kept, secrets = [], []
    for pair in query.split("&") if question else []:
        name, _, value = pair.partition("=")
        if urllib.parse.unquote(name).lower() in SECRET_KEYS:
            secrets.append((urllib.parse.unquote(name), urllib.parse.unquote(value)))
            _remember(value)
        else:
            kept.append(pair)
    safe = f"{scheme}://{head}{path}" + (f"?{'&'.join(kept)}" if kept else "")
    return Redacted(safe, certain, user, password, tuple(secrets))


def _conninfo(text: str) -> Redacted:
    """`host=db password=x dbname=notes` as `host=db dbname=notes`; one libpq would not read as
    pairs is not shown at all (its password may be anywhere)."""
    kept, position = [], 0
    while position < len(text.rstrip()):
        pair = _PAIR.match(text, position)
        if pair is None:
            return Redacted(UNREADABLE, certain=False)
        name, value = pair.groups()
        if name in SECRET_KEYS:
            _remember(value)
            _remember(_UNESCAPE.sub(r"\1", value[1:-1] if value.startswith("'") else value))
        else:
            kept.append(f"{name}={value}")
        position = pair.end()
    return Redacted(" ".join(kept))


def _remember(secret: str) -> None:
    """A secret, as written and percent-decoded, for scrub()."""
    _PASSWORDS.update({secret, urllib.parse.unquote(secret)} - {""})


def scrub(message: str, *secrets: str | None) -> str:
    """`message` (a server's error, which may echo the request) without `secrets` (an API key),
    any password redact() has seen, the longest first (one may hold another), or a bearer token
    or API key it spells out."""
    for secret in sorted(_PASSWORDS.union(s for s in secrets if s), key=len, reverse=True):
        message = message.replace(secret, HIDDEN)
    return _SPELLED_OUT.sub(rf"\1{HIDDEN}", message)
