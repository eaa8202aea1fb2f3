"""Pure renderers: what people read on a terminal, JSON for scripts, and the structured results
and short texts of the MCP tools, in the shapes `shapes` declares."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .notes import citation
from .store.lock import embedding_now

# the faces print names and text through output: these are theirs to use
from .text import escape_controls as escape_controls
from .text import escape_name as escape_name
from .text import unescape_name as unescape_name

if TYPE_CHECKING:  # the results' shapes: their TypedDicts load typing_extensions, for pydantic
    from .notes import Lines, NoteLinks
    from .search.pipeline import Answer, Hit
    from .search.related import Related
    from .shapes import (
        BacklinkEntry,
        LinkEntry,
        Links,
        NoteLines,
        RelatedResult,
        SearchHit,
        SearchResult,
        Tree,
        Written,
    )
    from .store.protocols import LinkRow
    from .sync.syncer import Report


def as_json(value: Any) -> str:
    """JSON that any parser reads: a NaN or an infinity is refused here, never printed."""
    return json.dumps(value, ensure_ascii=False, indent=2, allow_nan=False)


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def ago(seconds: float | None) -> str:
    """How long ago, for people: `never`, `40s ago`, `3.5 h ago`."""
    if seconds is None:
        return "never"
    if seconds < 0:  # the clock was set back since, or the writer's machine runs ahead of this one
        return "just now (the clock here is behind the time recorded)"
    return f"{_span(seconds)} ago"


def writer_text(writer: dict[str, Any] | None) -> str:
    """The index's writer from status's facts: which memsync, where, since when, its last sync."""
    if not writer:
        return "no watcher running"
    started = writer.get("started")
    uptime = f", up {_span(max(time.time() - float(started), 0.0))}" if started else ""
    runs_on = f" on {writer['host']}" if writer.get("host") else ""
    detail = f"memsync {writer.get('role', '?')} running (pid {writer.get('pid')}{runs_on}{uptime})"
    if writer.get("last_event"):
        detail += f", last event {ago(time.time() - float(writer['last_event']))}"
    if writer.get("last_sync"):
        detail += f", last sync {ago(time.time() - float(writer['last_sync']))}"
    return detail


def index_summary(report: Report, vault: str, model: str | None) -> str:
    lines = [
        f"Indexed {vault} in {report.seconds:.1f}s: {report.added} new, {report.changed} changed, "
        f"{report.moved} moved, {report.removed} removed, {report.touched} touched, "
        f"{report.unchanged} unchanged.",
        f"Chunks written: {report.chunks_written}; embedded now: {report.embedded}"
        + (f" with {model}" if model else "")
        + (f"; still without vectors: {report.pending}" if report.pending else "")
        + ".",
    ]
    if report.skipped:
        lines.append(f"Skipped {len(report.skipped)} file(s):")
        lines += [_about(path, reason) for path, reason in report.skipped]
    if report.warnings:
        lines += [_about(path, warning, "Warning: ") for path, warning in report.warnings]
    return "\n".join(lines)


def _skipped_on_disk(notes: int, others: int) -> str:
    """So that the counts add up: a skipped link or folder is no note on disk."""
    if not others:
        return f" ({notes} skipped, listed below)" if notes else ""
    entries = "1 other entry" if others == 1 else f"{others} other entries"
    return (f" ({notes} skipped), " if notes else "; ") + f"{entries} skipped, listed below"


def status_text(facts: dict[str, Any]) -> str:
    """`memsync status` for people: where, what model, how much, who writes, how fresh."""
    host = f" on {facts['vault_host']}" if facts.get("vault_host") else ""
    # a shared index made before hosts were recorded does not say which machine its notes are on
    notes_on = host or " on the machine that indexed them"
    lines = [f"vault:    {facts['vault'] or '(unknown)'}{host}", f"index:    {facts['db']}"]
    if facts["model"]:
        lines.append(f"model:    {facts['provider']} {facts['model']} ({facts['dims']} dims)")
        kept = "; this server searches its copy in memory" if facts["vectors_in_memory"] else ""
        lines.append(f"vectors:  {facts['vector_backend']}{kept}")
    else:  # the user's choice (--provider none), said here once rather than by every query
        lines.append("model:    none")
        lines.append("vectors:  none (indexed without an embedding model: keyword search only)")
    if facts["read_only"]:
        lines.append("access:   read-only for this user (queries are not refreshed)")
    if facts.get("schema_behind"):
        lines.append(f"schema:   {facts['schema_behind']}")
    lines.append(f"files:    {_files_status(facts, notes_on)}")
    chunks = f"chunks:   {facts['chunks']}"
    if facts["model"]:
        chunks += f" ({facts['chunks_embedded']} with vectors, "
        chunks += f"{facts['chunks_pending']} waiting for embeddings)"
    lines.append(chunks)
    if "links" in facts:
        lines.append(f"links:    {facts['links']} ({facts['unresolved_links']} unresolved)")
    lines += _writer_status(facts["writer"])
    lines.append(f"synced:   {ago(facts['last_sync_age_s'])}")
    lines.append(f"state:    {_sync_state(facts, notes_on)}")
    if facts["skipped"]:
        lines.append(f"skipped:  {len(facts['skipped'])} file(s)")
        lines += [_about(s["path"], s["reason"]) for s in facts["skipped"]]
    if facts["warnings"]:
        lines.append(f"warnings: {len(facts['warnings'])} note(s), indexed anyway")
        lines += [_about(w["path"], w["warning"]) for w in facts["warnings"]]
    return "\n".join(lines)


def _files_status(facts: dict[str, Any], notes_on: str) -> str:
    """Files indexed, and notes on disk when the vault folder is here to count."""
    disk = facts["disk"]
    if disk["present"]:
        skipped = _skipped_on_disk(disk["skipped_notes"], disk["skipped"] - disk["skipped_notes"])
        return f"{facts['files_indexed']} indexed, {disk['files']} notes on disk{skipped}"
    if disk.get("here") is False:
        return f"{facts['files_indexed']} indexed; the notes are{notes_on}, not on this one"
    return f"{facts['files_indexed']} indexed; the vault folder is not there now"


def _writer_status(writer: dict[str, Any]) -> list[str]:
    """The writer's line (who, since when, its last event and sync), its errors, what it cannot
    watch."""
    if not writer:
        return ["writer:   no watcher running"]
    lines = [f"writer:   {writer_text(writer)}"]
    if writer.get("embedding_error"):
        lines.append(f"errors:   embedding: {writer['embedding_error']}")
    if writer.get("unwatched"):
        folders = ", ".join(f"{f}/" for f in writer["unwatched"])
        lines.append(
            f"unwatched: {folders} (too deep to watch; the periodic reconcile covers them)"
        )
    return lines


def _sync_state(facts: dict[str, Any], notes_on: str) -> str:
    """Up to date, not comparable here, or behind and why."""
    disk = facts["disk"]
    if facts["complete"]:
        return "up to date"
    if facts["text_up_to_date"] and not facts["model"]:
        return "up to date"
    if disk.get("here") is False:
        return f"not compared here: the vault's notes are{notes_on}, where its writer runs"
    if not disk["present"]:
        return (
            "the vault folder is not there now (moved, deleted or not mounted): cannot compare "
            "it with the index"
        )
    behind = [f"{disk[k]} {k}" for k in ("new", "changed", "removed") if disk.get(k)]
    parts = []
    if not facts["rules_current"]:
        parts.append(
            "indexed by an older memsync's rules (memsync index VAULT chunks every note "
            "again, and embeds the chunks that changed)"
        )
    if behind:
        parts.append("notes on disk differ from the index (" + ", ".join(behind) + ")")
    if facts["chunks_pending"]:
        who = embedding_now((facts["writer"] or {}).get("role"))
        waiting = f"{facts['chunks_pending']} chunks without vectors"
        parts.append(waiting + (f" ({who})" if who else ""))
    return "behind: " + "; ".join(parts)


def vaults_text(facts: dict[str, Any]) -> str:
    """The indexes `memsync vaults` lists (a PostgreSQL database's vaults, or this user's index
    files), one line each, named as `memsync vaults forget` takes them."""
    if not facts["vaults"]:
        how = "memsync index VAULT --db URL" if facts["postgresql"] else "memsync index VAULT"
        return f"{facts['db']}: no vault indexed yet ({how})"
    lines = [f"{facts['db']}: {len(facts['vaults'])} vault(s)"]
    for vault in facts["vaults"]:
        lines.append(f"  {vault_line(vault)}")
    return "\n".join(lines)


def vault_line(vault: dict[str, Any]) -> str:
    """One vault of `memsync vaults`: its name, then what its index holds, on one line."""
    return escape_controls(f"{vault['name']}: {_vault_details(vault)}")


def _vault_details(vault: dict[str, Any]) -> str:
    if vault.get("error"):
        return f"cannot be read: {vault['error']}"
    writer = vault["writer"]
    who = (
        f"{writer.get('role')} pid {writer.get('pid')} on {writer.get('host')}"
        if writer
        else "no writer"
    )
    folder = vault["vault"] or "(unknown folder)"
    if vault["vault_exists"] is False:
        folder += " (folder gone)"
    return (
        f"{folder}, {vault['files']} files, {vault['chunks']} chunks "
        f"({vault['chunks_pending']} without vectors), {size_text(vault['size_bytes'])}, "
        f"synced {ago(vault['last_sync_age_s'])}, model {vault['model'] or 'none'}, {who}"
    )


def size_text(size: int) -> str:
    """Bytes for people: `812 B`, `4.2 MB`."""
    if size < 1000:
        return f"{size} B"
    power = min(3, (len(str(size)) - 1) // 3)
    return f"{size / 1000**power:.1f} {('KB', 'MB', 'GB')[power - 1]}"


def _about(path: str, why: str, lead: str = "  ") -> str:
    """A skipped file or a note's warning, one line: its name may hold any character."""
    return escape_controls(f"{lead}{path}: {why}")


def numbered(lines: Lines) -> str:
    """The lines read, each after its number (`12 | text`), control characters as escapes."""
    if lines.end_line < lines.start_line:
        return ""
    width = len(str(lines.end_line))
    return "\n".join(
        f"{n:>{width}} | {escape_controls(line)}"
        for n, line in enumerate(lines.text.split("\n"), start=lines.start_line)
    )


def wants_color(is_tty: bool, environ: dict[str, str]) -> bool:
    """Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org)."""
    return is_tty and "NO_COLOR" not in environ and environ.get("TERM") != "dumb"


def marked(
    text: str, terms: list[str], mark: Callable[[str], str], plain: Callable[[str], str] = str
) -> str:
    """`text` with each occurrence of a term (any case) passed through `mark`, the rest through
    `plain`: colour on a terminal, `<mark>` and escaping in HTML."""
    if not terms:
        return plain(text)
    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)
    pieces, last = [], 0
    for match in pattern.finditer(text):
        pieces += [plain(text[last : match.start()]), mark(match.group())]
        last = match.end()
    return "".join([*pieces, plain(text[last:])])


def hyperlink(text: str, target: Path) -> str:
    """OSC-8: the terminal shows `text` and opens `target` when it is clicked."""
    return f"\033]8;;{target.as_uri()}\033\\{text}\033]8;;\033\\"


def explanation(why: dict[str, Any]) -> str:
    def number(value: Any) -> str:
        return "-" if value is None else f"{value:g}"

    parts = [
        f"bm25 {number(why['bm25'])}"
        + (" (the question's words translated)" if why.get("glossed") else "")
        + f" -> text {number(why['text_score'])}",
        f"cosine {number(why['cosine'])} -> vector {number(why['vector_score'])}",
        f"fused {number(why['fused'])}"
        + (" (exact match: at least 0.9)" if why["exact_match"] else ""),
    ]
    if why["decay"] != 1.0:
        parts.append(f"decay x{number(why['decay'])}")
    if why["note_repeat"] != 1.0:  # a further result of its note, or the rest of a listed chunk
        parts.append(f"note repeat x{number(why['note_repeat'])}")
    if why["mmr_penalty"]:
        parts.append(f"mmr -{number(why['mmr_penalty'])}")
    if why.get("nearest_window"):
        parts.append("nearest window: lines {}-{}".format(*why["nearest_window"]))
    if "rerank" in why:
        parts.append(_rerank_explained(why["rerank"]))
    return "; ".join(parts)


def _rerank_explained(rerank: dict[str, Any]) -> str:
    fused = f"fused #{rerank['fused_rank']}"
    if rerank["score"] is None:
        return f"not reranked, {rerank['not_reranked']} ({fused})"
    return f"reranked: score {rerank['score']:g} ({fused})"


def mode_ran(ran: str, requested: str) -> str:
    """Said when a search ran another mode than the one asked for (no vectors, no model)."""
    return f"ran {ran} search; {requested} was asked for"


def query_text(outcome: Any, terms: list[str], color: bool, links: Path | None = None) -> str:
    """Rank, score, path:start-end (editors jump there; with `links`, the vault, a terminal link
    to the file too), and the best-matching lines."""
    lines = []
    if outcome.mode != outcome.requested_mode and outcome.notices:  # the notices say why
        lines.append(f"({mode_ran(outcome.mode, outcome.requested_mode)})")
    for notice in outcome.notices:
        lines.append(f"note: {notice}")
    return "\n".join([*lines, *_hits_text(outcome.results, terms, color, links)])


def related_text(answer: Related, color: bool, links: Path | None = None) -> str:
    """`memsync related`: as query lists its results, the notices first."""
    lines = [f"note: {notice}" for notice in answer.notices]
    return "\n".join([*lines, *_hits_text(answer.results, [], color, links)])


def _hits_text(results: list[Hit], terms: list[str], color: bool, links: Path | None) -> list[str]:
    lines = []
    for rank, hit in enumerate(results, start=1):
        where = f"{escape_name(hit.path)}:{hit.start_line}-{hit.end_line}"
        if links is not None:
            where = hyperlink(where, links / hit.path)
        if color:
            where = f"\033[36m{where}\033[0m"
        flag = "  exact match" if hit.exact else ""
        lines.append(f"{rank}. {hit.score:.2f}  {where}{flag}")
        for offset, line in enumerate(hit.snippet.split("\n")):
            highlighted = escape_controls(line)
            if color:
                highlighted = marked(highlighted, terms, lambda word: f"\033[1;33m{word}\033[0m")
            lines.append(f"   {hit.snippet_start + offset:>5} | {highlighted}")
        if hit.explain is not None:
            lines.append(f"   why: {explanation(hit.explain)}")
    return lines


# -- the MCP tools' results ----------------------------------------------------------------------


def search_result(answer: Answer) -> SearchResult:
    """`memsync query --json`'s results, with the fields the tool's schema names and a citation."""
    return {
        "query": answer.query,
        "mode": answer.mode,
        "notices": answer.notices,
        "terms": list(answer.terms),
        "results": search_hits(answer.results),
    }


def search_hits(results: list[Hit]) -> list[SearchHit]:
    """Hits with the fields the tools' schemas name, and each one's citation."""
    from .shapes import SearchHit

    hits = []
    for hit in results:
        data = hit.as_dict()
        data["citation"] = citation(hit.path, hit.start_line, hit.end_line)
        hits.append({key: data[key] for key in SearchHit.__annotations__})
    return hits  # type: ignore[return-value]


def related_result(answer: Related) -> RelatedResult:
    """`memsync related --json`, memory_related's and /api/related's answer: the same shape."""
    return {
        "note": answer.note,
        "mode": answer.mode,
        "notices": answer.notices,
        "results": search_hits(answer.results),
    }


def related_list(result: RelatedResult) -> str:
    """memory_related's text: as memory_search's."""
    lines = [f"note: {n}" for n in result["notices"]]
    if not result["results"]:
        lines.append(f"no notes related to {escape_name(result['note'])}")
    return "\n".join([*lines, *_cited(result["results"])])


def search_text(result: SearchResult) -> str:
    """A short list an agent can quote: citation, score, and the best-matching lines with their
    numbers, as memory_get shows lines (control characters as escapes, as on a terminal:
    agents' clients show tool results in one; the structured result holds the paths and lines
    as they are)."""
    lines = [f"note: {n}" for n in result["notices"]]
    if not result["results"]:
        lines.append(f"no notes match {result['query']!r}")
    return "\n".join([*lines, *_cited(result["results"])])


def _cited(results: list[SearchHit]) -> list[str]:
    lines = []
    for rank, hit in enumerate(results, start=1):
        both = ", keyword and meaning" if hit["hybrid_match"] else ""
        lines.append(f"{rank}. {escape_name(hit['citation'])} (score {hit['score']:.2f}{both})")
        first = hit["snippet_start_line"]
        lines += [
            f"   {first + i} | {escape_controls(line)}"
            for i, line in enumerate(hit["snippet"].split("\n"))
        ]
    return lines


def _size(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size / 1024:.1f} KB"


def tree_text(tree: Tree) -> str:
    """An indented tree: each folder once, its notes and folded subfolders below it."""
    if not tree["notes"] and not tree["folders"]:
        return f"no indexed notes under {tree['path'] or 'the vault'}"
    base = len(tree["path"].split("/")) if tree["path"] else 0
    # (path, what follows the name on its line); a folded folder's path ends with /
    entries = [
        (n["path"], f"  {_size(n['size'])}  {n['modified']}  {n['chunks']} chunks")
        for n in tree["notes"]
    ] + [(f["path"] + "/", f"/  ({f['notes']} notes below)") for f in tree["folders"]]
    lines: list[str] = []
    named_folders: set[str] = set()
    for path, detail in sorted(entries, key=lambda item: item[0].split("/")):
        parts = path.rstrip("/").split("/")
        for depth in range(base + 1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder not in named_folders:
                named_folders.add(folder)
                lines.append("  " * (depth - base - 1) + escape_name(parts[depth - 1]) + "/")
        lines.append("  " * (len(parts) - base - 1) + escape_name(parts[-1]) + detail)
    if tree["more"]:
        lines.append(f"({tree['more']})")
    return "\n".join(lines)


def lines_result(lines: Lines) -> tuple[str, NoteLines]:
    """memory_get's text (numbered lines, and how to read on when the read was cut) and data."""
    text = numbered(lines) or f"{escape_name(lines.path)} is empty"
    if lines.rest():
        text += f"\n({lines.rest()})"
    if lines.copy:
        text += f"\n({lines.copy}: the file itself is not readable here)"
    return text, lines.as_dict()  # type: ignore[return-value]


def written_text(written: Written) -> str:
    return f"wrote {written['citation']}" + ("" if written["indexed"] else " (not indexed yet)")


def tokens_text(listed: list[dict[str, Any]], now: float | None = None) -> str:
    """`memsync token list`: a token a line, name, kind, when made and last used."""
    if not listed:
        return "no tokens: memsync token add NAME makes one"
    now = time.time() if now is None else now
    width = max(len(token["name"]) for token in listed)
    return "\n".join(
        f"{token['name']:<{width}}  {token['kind']:<5}  made {ago(now - token['created'])}, "
        f"last used {ago(None if token['last_used'] is None else now - token['last_used'])}"
        for token in listed
    )


def link_dict(link: LinkRow) -> LinkEntry:
    return {
        "path": link.source,
        "line": link.line,
        "link": link.written,
        "kind": link.kind,
        "target": link.target,
        "anchor": link.anchor,
        "resolved": link.resolved,
        "citation": citation(link.source, link.line, link.line),
    }


def links_data(found: NoteLinks) -> Links:
    """`memsync links NOTE --json` and memory_links' data."""
    backlinks: list[BacklinkEntry] = [
        {**link_dict(b.link), "text": b.text} for b in found.backlinks
    ]
    return {
        "path": found.path,
        "links": [link_dict(link) for link in found.outgoing],
        "backlinks": backlinks,
        "more": found.more,
    }


def links_text(found: NoteLinks) -> str:
    """A note's links (line, as written, the note each opens) and backlinks (`path:line` and
    that line, once for a line that links to it twice: the data lists each link), names and
    lines escaped as everywhere."""
    lines = [f"{escape_name(found.path)}: {len(found.outgoing)} link(s)"]
    for link in found.outgoing:
        opens = escape_name(link.resolved) if link.resolved else "unresolved"
        lines.append(f"  {link.line}: {escape_controls(link.written)} -> {opens}")
    linking = {(b.link.source, b.link.line): b.text for b in found.backlinks}
    lined = f"{len(linking)} line" + ("s" if len(linking) > 1 else "")
    on = f", on {lined}" if len(linking) < len(found.backlinks) else ""
    lines.append(f"backlinks: {len(found.backlinks)}{on}")
    lines += [
        f"  {escape_name(source)}:{line}: {escape_controls(text.strip())}"
        for (source, line), text in linking.items()
    ]
    if found.more:
        lines.append(f"({found.more})")
    return "\n".join(lines)


def vault_links_text(links: list[LinkRow], kind: str) -> str:
    """`links --unresolved`: each broken link as `path:line` and the link; `--ambiguous`: each
    link by a shared name, and the note it opens."""
    if not links:
        return f"no {kind} links"
    return "\n".join(
        f"{escape_name(link.source)}:{link.line}: {escape_controls(link.written)}"
        + (f" -> {escape_name(link.resolved)}" if link.resolved else "")
        for link in links
    )
