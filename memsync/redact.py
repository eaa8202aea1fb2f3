"""Database URLs as they may be shown: printed, logged or stored without their password."""

from __future__ import annotations

import urllib.parse

_PASSWORDS: set[str] = set()  # every password seen in a URL, scrubbed from any message


def redact(url: str) -> str:
    """The URL without its password (user info and `password=`), safe to print, log or store,
    and still a URL that can be pasted back."""
    parts = urllib.parse.urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        if ":" in user:
            _PASSWORDS.add(urllib.parse.unquote(user.partition(":")[2]))
        netloc = f"{user.partition(':')[0]}@{host}"
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True)
    _PASSWORDS.update(v for k, v in query if k == "password")
    kept = urllib.parse.urlencode([(k, v) for k, v in query if k != "password"], safe="/")
    # urlunsplit drops the `//` of an empty host (postgresql:///db?host=/socket): build it whole
    shown = f"{parts.scheme}://{netloc}{parts.path}"
    return shown + (f"?{kept}" if kept else "") + (f"#{parts.fragment}" if parts.fragment else "")


def scrub(message: str) -> str:
    """`message` with every password redact() has seen replaced."""
    for password in _PASSWORDS:
        if password:
            message = message.replace(password, "***")
    return message
