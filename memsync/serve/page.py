"""The search page's HTML, pure: the form, the results, one note's lines, the status line and
short notices (a 401's how to log in), made from the values the JSON API returns; every text
from a note or a request is escaped, so a note holding markup shows it as text."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from importlib import resources
from typing import Any
from urllib.parse import urlencode

from ..config import MODES
from ..output import ago, escape_controls, escape_name, marked, mode_ran, writer_text

# the files the page links to, read once: package data, served by memsync itself (no CDN)
ASSETS = {
    name: resources.files(__package__).joinpath("assets", name).read_bytes()
    for name in ("page.css", "icon.svg")
}


def asset_href(name: str) -> str:
    """A relative link that changes with the file's bytes, so that it may be cached for good."""
    digest = hashlib.sha256(ASSETS[name]).hexdigest()[:12]
    return f"assets/{name}?v={digest}"


@dataclass(frozen=True)
class Form:
    """The search form's values as typed: the query and the filters of `memsync query`."""

    q: str = ""
    paths: tuple[str, ...] = ()
    since: str = ""
    until: str = ""
    tags: tuple[str, ...] = ()
    mode: str = ""

    def search_args(self) -> dict[str, Any]:
        """The search callable's keyword arguments (an empty field: the configured default)."""
        return {
            "paths": list(self.paths),
            "since": self.since or None,
            "until": self.until or None,
            "tags": list(self.tags),
            "mode": self.mode or None,
        }


def form_of(items: Iterable[tuple[str, str]]) -> Form:
    """The form from a query string's (name, value) pairs: `path` and `tag` may repeat (a tag
    field holding several tags apart by spaces or commas is split where every face's are)."""
    values: dict[str, list[str]] = {}
    for name, value in items:
        values.setdefault(name, []).append(value)

    def one(name: str) -> str:
        return values.get(name, [""])[0].strip()

    tags = [value.strip() for value in values.get("tag", []) if value.strip()]
    return Form(
        q=values.get("q", [""])[0],
        paths=tuple(p.strip() for p in values.get("path", []) if p.strip()),
        since=one("since"),
        until=one("until"),
        tags=tuple(tags),
        mode=one("mode"),
    )


def _document(title: str, body: str, styled: bool = True) -> str:
    """A whole page; `styled` links the stylesheet and icon (relative: under the page's folder)."""
    links = (
        f'<link rel="stylesheet" href="{escape(asset_href("page.css"))}">\n'
        f'<link rel="icon" href="{escape(asset_href("icon.svg"))}">\n'
        if styled
        else ""
    )
    return (
        '<!doctype html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{escape(title)}</title>\n{links}</head>\n<body>\n{body}</body>\n</html>\n"
    )


def _text(value: str) -> str:
    """Text from a note or a request, for HTML: control characters as escapes, markup escaped."""
    return escape(escape_controls(value))


def status_line(facts: dict[str, Any] | None, error: str = "") -> str:
    """Notes indexed, chunks waiting for vectors (or keyword search only, in an index made
    without a model, as `status` says), the writer, the last sync: from `memsync status
    --json`'s facts, or why they could not be read."""
    if facts is None:
        return f'<p class="status">status unavailable: {_text(error)}</p>\n'
    writer = facts["writer"] and {**facts["writer"], "last_sync": None}  # said once, below
    parts = [
        f"{facts['files_indexed']} notes indexed",
        f"{facts['chunks_pending']} chunks waiting for vectors"
        if facts["model"]
        else "keyword search only",
        f"writer: {writer_text(writer)}",
        f"last sync {ago(facts['last_sync_age_s'])}",
    ]
    return '<p class="status">' + " · ".join(_text(part) for part in parts) + "</p>\n"


def _header(status: str) -> str:
    return f'<header>\n<a class="home" href="./">memsync</a>\n{status}</header>\n'


def _form(form: Form) -> str:
    def field(label: str, name: str, value: str, hint: str) -> str:
        return (
            f'<label>{label} <input name="{name}" value="{escape(value)}" '
            f'placeholder="{escape(hint)}"></label>\n'
        )

    paths = "".join(
        field("Path", "path", path, "projects/ or daily/2026-11-*.md")
        for path in (form.paths or ("",))
    )
    modes = "".join(
        f'<option value="{m}"{" selected" if m == form.mode else ""}>{m}</option>' for m in MODES
    )
    return (
        '<form class="search" method="get" action="./" role="search">\n'
        '<p><input type="search" name="q" aria-label="Search the notes" '
        f'value="{escape(form.q)}" autofocus> <button type="submit">Search</button></p>\n'
        "<fieldset><legend>Filters</legend>\n"
        + paths
        + field("Since", "since", form.since, "YYYY-MM-DD, today, 7d, 2w, 3m")
        + field("Until", "until", form.until, "same forms as since")
        + field("Tags", "tag", " ".join(form.tags), "project/heron ops (all must match)")
        + f'<label>Mode <select name="mode"><option value="">default</option>{modes}</select>'
        "</label>\n</fieldset>\n</form>\n"
    )


def note_link(path: str, start: int, end: int) -> str:
    """The note view of lines start-end, scrolled to the first of them."""
    return "note?" + urlencode({"location": f"{path}:{start}-{end}"}) + f"#L{start}"


def _hit(hit: dict[str, Any], terms: list[str]) -> str:
    where = f"{escape_name(hit['path'])}:{hit['start_line']}-{hit['end_line']}"
    legs = [
        f"{leg} {hit[key]:.2f}"
        for leg, key in (("keyword", "text_score"), ("meaning", "vector_score"))
        if hit[key] is not None
    ]
    flag = ' <span class="exact">exact match</span>' if hit.get("exact_match") else ""
    lines = "".join(
        f'<span class="n">{number}</span> '
        + marked(escape_controls(line), terms, lambda word: f"<mark>{escape(word)}</mark>", escape)
        + "\n"
        for number, line in enumerate(hit["snippet"].split("\n"), start=hit["snippet_start_line"])
    )
    href = note_link(hit["path"], hit["start_line"], hit["end_line"])
    return (
        f'<li>\n<p class="where"><a href="{escape(href)}">{escape(where)}</a> '
        f'<span class="score">{hit["score"]:.2f}</span>'
        f' <span class="legs">{escape(", ".join(legs))}</span>{flag}</p>\n'
        f'<pre class="snippet">{lines}</pre>\n</li>\n'
    )


def _results(result: dict[str, Any], terms: list[str]) -> str:
    """`memsync query --json`'s object: what ran, its notices, the results in rank order."""
    said = []
    if result["mode"] != result["requested_mode"] and result["notices"]:  # they say why
        said.append(mode_ran(result["mode"], result["requested_mode"]))
    said += [f"note: {notice}" for notice in result["notices"]]
    out = "".join(f'<p class="notice">{_text(line)}</p>\n' for line in said)
    if not result["results"]:
        return out + f'<p class="none">No notes match {_text(repr(result["query"]))}.</p>\n'
    hits = "".join(_hit(hit, terms) for hit in result["results"])
    return out + f'<ol class="results">\n{hits}</ol>\n'


def _error(message: str) -> str:
    return f'<p class="error" role="alert">memsync: error: {_text(message)}</p>\n'


def search_page(
    form: Form,
    status: str,
    result: dict[str, Any] | None = None,
    terms: Sequence[str] = (),
    error: str = "",
) -> str:
    """The page at /: the status line (from status_line), the form with its values, then the
    error, or the results with the query's words marked in their lines."""
    body = _header(status) + "<main>\n" + _form(form)
    if error:
        body += _error(error)
    elif result is not None:
        body += _results(result, list(terms))
    title = f"{form.q} - memsync" if form.q.strip() else "memsync"
    return _document(title, body + "</main>\n")


def note_page(
    location: str,
    lines: dict[str, Any] | None,
    first: int | None,
    last: int | None,
    error: str = "",
    nearby: Mapping[str, Any] | None = None,
) -> str:
    """One note's lines (memory_get's data: NoteLines), each with its number and an anchor
    (#L12), lines first-last marked, then what is near it (page_routes.Nearby: its related
    notes, its links and backlinks); or why it could not be read."""
    body = _header("")
    if lines is None:
        return _document(f"{location} - memsync", body + "<main>\n" + _error(error) + "</main>\n")
    path = lines["path"]
    body += f"<main>\n<h1>{_text(escape_name(path))}</h1>\n"
    if lines["copy"]:
        body += f'<p class="notice">{_text(lines["copy"])}</p>\n'
    if lines["end_line"] < lines["start_line"]:
        body += f'<p class="none">{_text(escape_name(path))} is empty.</p>\n'
    else:
        body += '<pre class="note">'
        for number, line in enumerate(lines["text"].split("\n"), start=lines["start_line"]):
            chosen = first is not None and last is not None and first <= number <= last
            body += (
                f'<span id="L{number}" class="line{" hit" if chosen else ""}">'
                f'<a class="n" href="#L{number}">{number}</a> {_text(line)}\n</span>'
            )
        body += "</pre>\n"
    if lines["note"]:
        body += f'<p class="notice">{_text(lines["note"])}</p>\n'
    return _document(f"{path} - memsync", body + _nearby(nearby or {}) + "</main>\n")


def _nearby(nearby: Mapping[str, Any]) -> str:
    """A note's related notes (by meaning), then apart from them its links and backlinks."""
    if not nearby:
        return ""
    out = '<section class="related">\n<h2>Related notes</h2>\n'
    related = nearby.get("related")
    if related is None:
        out += _error(nearby.get("related_error", ""))
    else:
        out += "".join(f'<p class="notice">note: {_text(n)}</p>\n' for n in related["notices"])
        hits = "".join(_hit(hit, []) for hit in related["results"])
        out += f'<ol class="results">\n{hits}</ol>\n' if hits else '<p class="none">None.</p>\n'
    out += '</section>\n<section class="links">\n'
    links = nearby.get("links")
    if links is None:
        return out + "<h2>Links</h2>\n" + _error(nearby.get("links_error", "")) + "</section>\n"
    # a line holding two links to the note is one backlink to read
    lines = {(entry["path"], entry["line"]): entry for entry in links["backlinks"]}
    for title, entries in (("Links", links["links"]), ("Backlinks", list(lines.values()))):
        items = "".join(_link(entry, title == "Backlinks") for entry in entries)
        out += f"<h2>{title}</h2>\n" + (
            f"<ul>\n{items}</ul>\n" if items else '<p class="none">None.</p>\n'
        )
    if links["more"]:
        out += f'<p class="notice">{_text(links["more"])}</p>\n'
    return out + "</section>\n"


def _link(entry: Mapping[str, Any], backlink: bool) -> str:
    """A link as written, to the note it opens (or saying it opens none); a backlink as the
    linking note's line, to that line."""
    if backlink:
        where = f"{escape_name(entry['path'])}:{entry['line']}"
        href = note_link(entry["path"], entry["line"], entry["line"])
        said = f' <span class="legs">{_text(entry["text"].strip())}</span>'
        return f'<li><a href="{escape(href)}">{_text(where)}</a>{said}</li>\n'
    written = _text(entry["link"])
    if entry["resolved"] is None:
        return f'<li>{written} <span class="legs">opens no note</span></li>\n'
    href = "note?" + urlencode({"location": entry["resolved"]})
    return f'<li><a href="{escape(href)}">{written}</a></li>\n'


def notice_page(title: str, message: str, styled: bool = True) -> str:
    """A short page of one message: a refusal, nothing at an address; `styled` under the page's
    folder, where its stylesheet and its home link are (outside it, neither is given away)."""
    header = _header("") if styled else ""
    body = f"{header}<main>\n<h1>{_text(title)}</h1>\n<p>{_text(message)}</p>\n</main>\n"
    return _document(f"{title} - memsync", body, styled)


def login_page(message: str, action: str = "login") -> str:
    """The login form (under the page's folder): a token, posted in the form's body to `action`
    (the folder's `login`, relative to the address shown), becomes the browser's session."""
    why = f'<p class="error" role="alert">{_text(message)}</p>\n' if message else ""
    body = (
        f"{_header('')}<main>\n<h1>Log in</h1>\n{why}"
        f'<form class="login" method="post" action="{escape(action)}">\n'
        '<p><label>Token <input type="password" name="token" autocomplete="current-password" '
        'required autofocus></label> <button type="submit">Log in</button></p>\n</form>\n'
        "<p>A token is printed once, when it is made: by <code>memsync token add NAME</code>, "
        "or by the first <code>memsync serve</code> on a terminal, with a login address that "
        "holds it. Agents send it as the header "
        "<code>Authorization: Bearer TOKEN</code>.</p>\n</main>\n"
    )
    return _document("Log in - memsync", body)
