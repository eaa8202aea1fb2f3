"""Pure renderers: what people read on a terminal, and JSON for scripts and agents."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .sync import Report


def as_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, indent=2)


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return "never"
    if seconds < 90:
        return f"{seconds:.0f}s ago"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h ago"
    return f"{seconds / 86400:.0f} days ago"


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
        lines += [f"  {path}: {reason}" for path, reason in report.skipped]
    if report.warnings:
        lines += [f"Warning: {path}: {warning}" for path, warning in report.warnings]
    return "\n".join(lines)


def status_text(facts: dict[str, Any]) -> str:
    disk = facts["disk"]
    host = f" on {facts['vault_host']}" if facts.get("vault_host") else ""
    lines = [f"vault:    {facts['vault'] or '(unknown)'}{host}", f"index:    {facts['db']}"]
    elsewhere = disk.get("here") is False
    if facts["model"]:
        lines.append(f"model:    {facts['provider']} {facts['model']} ({facts['dims']} dims)")
    else:
        lines.append("model:    none (keyword search only)")
    lines.append(f"vectors:  {facts['vector_backend']}")
    if facts["read_only"]:
        lines.append("access:   read-only for this user (queries are not refreshed)")
    if disk["present"]:
        skipped = f" ({disk['skipped']} skipped, listed below)" if disk["skipped"] else ""
        lines.append(
            f"files:    {facts['files_indexed']} indexed, {disk['files']} notes on disk{skipped}"
        )
    elif elsewhere:
        lines.append(
            f"files:    {facts['files_indexed']} indexed; the notes are{host}, not on this machine"
        )
    else:
        lines.append(
            f"files:    {facts['files_indexed']} indexed; the vault folder is not on this machine"
        )
    lines.append(
        f"chunks:   {facts['chunks']} ({facts['chunks_embedded']} with vectors, "
        f"{facts['chunks_pending']} waiting for embeddings)"
    )
    writer = facts["writer"]
    if writer:
        started = writer.get("started")
        uptime = f", up {_ago(time.time() - float(started)).replace(' ago', '')}" if started else ""
        host = f" on {writer['host']}" if writer.get("host") else ""
        detail = (
            f"memsync {writer.get('role', '?')} running (pid {writer.get('pid')}{host}{uptime})"
        )
        if writer.get("last_event"):
            detail += f", last event {_ago(time.time() - float(writer['last_event']))}"
        if writer.get("last_sync"):
            detail += f", last sync {_ago(time.time() - float(writer['last_sync']))}"
        lines.append(f"writer:   {detail}")
        if writer.get("embedding_error"):
            lines.append(f"errors:   embedding: {writer['embedding_error']}")
        if writer.get("unwatched"):
            folders = ", ".join(f"{f}/" for f in writer["unwatched"])  # type: ignore[union-attr]
            lines.append(
                f"unwatched: {folders} (too deep to watch; the periodic reconcile covers them)"
            )
    else:
        lines.append("writer:   no watcher running")
    lines.append(f"synced:   {_ago(facts['last_sync_age_s'])}")
    if facts["complete"]:
        state = "up to date"
    elif facts["text_up_to_date"] and not facts["model"]:
        state = "up to date for keyword search (no embedding model has run: memsync index VAULT)"
    elif elsewhere:
        state = f"not compared here: the vault's notes are{host}, where its writer runs"
    elif not disk["present"]:
        state = "vault folder not on this machine: cannot compare it with the index"
    else:
        behind = [f"{disk[k]} {k}" for k in ("new", "changed", "removed") if disk.get(k)]
        parts = []
        if behind:
            parts.append("notes on disk differ from the index (" + ", ".join(behind) + ")")
        if facts["chunks_pending"]:
            parts.append(f"{facts['chunks_pending']} chunks without vectors")
        state = "behind: " + "; ".join(parts)
    lines.append(f"state:    {state}")
    if facts["skipped"]:
        lines.append(f"skipped:  {len(facts['skipped'])} file(s)")
        lines += [f"  {s['path']}: {s['reason']}" for s in facts["skipped"]]
    if facts["warnings"]:
        lines.append(f"warnings: {len(facts['warnings'])} note(s), indexed anyway")
        lines += [f"  {w['path']}: {w['warning']}" for w in facts["warnings"]]
    return "\n".join(lines)


def vaults_text(facts: dict[str, Any]) -> str:
    """The vaults of one PostgreSQL database, one line each."""
    if not facts["vaults"]:
        return f"{facts['db']}: no vault indexed yet (memsync index VAULT --db URL)"
    lines = [f"{facts['db']}: {len(facts['vaults'])} vault(s)"]
    for vault in facts["vaults"]:
        writer = vault["writer"]
        who = (
            f"{writer.get('role')} pid {writer.get('pid')} on {writer.get('host')}"
            if writer
            else "no writer"
        )
        lines.append(
            f"  {vault['name']}: {vault['vault'] or '(unknown folder)'}, {vault['files']} files, "
            f"{vault['chunks']} chunks ({vault['chunks_pending']} without vectors), "
            f"model {vault['model'] or 'none'}, {who}"
        )
    return "\n".join(lines)


def wants_color(is_tty: bool, environ: dict[str, str]) -> bool:
    """Colour only for a person at a terminal, and never when NO_COLOR is set (no-color.org)."""
    return is_tty and "NO_COLOR" not in environ and environ.get("TERM") != "dumb"


def _highlight(text: str, terms: list[str], color: bool) -> str:
    if not color or not terms:
        return text
    import re

    pattern = re.compile("|".join(re.escape(t) for t in terms), re.IGNORECASE)
    return pattern.sub(lambda m: f"\033[1;33m{m.group()}\033[0m", text)


def hyperlink(text: str, target: Path) -> str:
    """OSC-8: the terminal shows `text` and opens `target` when it is clicked."""
    return f"\033]8;;{target.as_uri()}\033\\{text}\033]8;;\033\\"


def explanation(why: dict[str, Any]) -> str:
    def number(value: Any) -> str:
        return "-" if value is None else f"{value:g}"

    parts = [
        f"bm25 {number(why['bm25'])} -> text {number(why['text_score'])}",
        f"cosine {number(why['cosine'])} -> vector {number(why['vector_score'])}",
        f"fused {number(why['fused'])}"
        + (" (exact match: at least 0.9)" if why["exact_match"] else ""),
    ]
    if why["decay"] != 1.0:
        parts.append(f"decay x{number(why['decay'])}")
    if why["mmr_penalty"]:
        parts.append(f"mmr -{number(why['mmr_penalty'])}")
    return "; ".join(parts)


def query_text(outcome: Any, terms: list[str], color: bool, links: Path | None = None) -> str:
    """Rank, score, path:start-end (editors jump there; with `links`, the vault, a terminal link
    to the file too), and the best-matching lines."""
    lines = []
    if outcome.mode != outcome.requested_mode:
        lines.append(f"(ran {outcome.mode} search; {outcome.requested_mode} was asked for)")
    for notice in outcome.notices:
        lines.append(f"note: {notice}")
    for rank, hit in enumerate(outcome.results, start=1):
        where = f"{hit.path}:{hit.start_line}-{hit.end_line}"
        if links is not None:
            where = hyperlink(where, links / hit.path)
        if color:
            where = f"\033[36m{where}\033[0m"
        flag = "  exact match" if hit.exact else ""
        lines.append(f"{rank}. {hit.score:.2f}  {where}{flag}")
        for offset, line in enumerate(hit.snippet.split("\n")):
            lines.append(f"   {hit.snippet_start + offset:>5} | {_highlight(line, terms, color)}")
        if hit.explain is not None:
            lines.append(f"   why: {explanation(hit.explain)}")
    return "\n".join(lines)
