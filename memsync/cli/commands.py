"""The `memsync` command: parse flags, make one call on the library face (memory), render (output).
Imports stay lazy so that `memsync query` starts fast."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import MODES, RANGES, RELATED_LIMIT, Config, current, env, resolved_db
from ..errors import ConfigError, MemsyncError
from . import service as service_commands
from . import serving as serve_commands
from .common import (
    DEFAULTS,
    MCP_INSTALL,
    BoundedGroup,
    Setting,
    _config,
    _log_handler,
    _log_to,
    _Message,
    echo,
    number_option,
    watch_options,
    writer_options,
)

if TYPE_CHECKING:
    from ..sync.watcher import Watcher


def _progress_factory(bars: list[Any]):  # type: ignore[no-untyped-def]
    """Progress bars on stderr when it is a terminal; nothing otherwise."""
    stderr = current().stderr
    if not stderr.isatty():
        return None

    def open_bar(label: str, total: int) -> Callable[[int], None]:
        bar = click.progressbar(length=total, label=label, file=stderr)
        bar.__enter__()
        bars.append(bar)
        return bar.update

    return open_bar


class Commands(BoundedGroup):
    """memsync's commands, refusing an argument that is not UTF-8 text as a usage error before
    any command sees it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        from ..config import utf8_text

        for arg in args:
            try:
                utf8_text(arg, "argument")
            except ConfigError as exc:
                raise click.UsageError(str(exc), ctx) from None
        return super().parse_args(ctx, args)


@click.group(cls=Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="memsync")
def main() -> None:
    """A fresh, offline, searchable index of your Markdown notes."""
    _warnings_as_messages()


def _warnings_as_messages() -> None:
    """A warning memsync logs (a provider retried) reads like memsync's other messages on stderr;
    watch and mcp put their own log in its place."""
    from ..daemon.session import current

    session = current()
    if session is not None:  # a daemon runs this command for a client: to the client's stderr
        session.log_to(_Message(logging.WARNING))
        return
    memsync_log = logging.getLogger("memsync")
    if not any(isinstance(h, _Message) for h in memsync_log.handlers):
        memsync_log.addHandler(_Message(logging.WARNING))


def reader_options(command: Callable[..., None]) -> Callable[..., None]:
    """--vault, --db, --name: which index a reading command (query, get, status, mcp) uses."""
    command = click.option(
        "--name",
        help="Which vault of a PostgreSQL --db (default: its only vault).",
    )(command)
    command = click.option("--db", help="The index file, or a postgresql:// URL (env MEMSYNC_DB).")(
        command
    )
    return click.option(
        "--vault",
        type=click.Path(path_type=Path),
        help="The vault whose index to use (default: the vault around the current folder, "
        "else the only one indexed).",
    )(command)


@main.command()
@writer_options
@number_option("--max-file-mb", help="Skip notes larger than this")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def index(
    vault: Path,
    db: str | None,
    name: str | None,
    provider: str | None,
    model: str | None,
    replace: bool,
    max_file_mb: float | None,
    as_json: bool,
) -> None:
    """Sync VAULT into its index: text first, then vectors for what changed."""

    from .. import memory, output

    config = _config(db=db, name=name, provider=provider, model=model, max_file_mb=max_file_mb)
    bars: list[Any] = []
    try:
        done = memory.index(
            config,
            vault,
            replace_vault=replace,
            progress=_progress_factory(bars),
            notice=lambda message: echo(f"memsync: {message}", err=True),
        )
    finally:
        for bar in bars:
            bar.__exit__(None, None, None)
    if as_json:
        summary = {"vault": str(done.vault), "db": done.db, **done.report.as_dict()}
        echo(output.as_json(summary))
    else:
        echo(output.index_summary(done.report, str(done.vault), done.model))


@main.command()
@reader_options
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def status(vault: Path | None, db: str | None, name: str | None, as_json: bool) -> None:
    """What is indexed, with which model, and whether it matches the notes on disk; for a
    PostgreSQL --db without --name, the vaults it holds."""

    from .. import memory, output

    config = _config(db=db, name=name)
    if memory.lists_vaults(config):
        facts = memory.vaults(config)
        echo(output.as_json(facts) if as_json else output.vaults_text(facts))
        return
    with memory.Memory.open(config, vault) as opened:
        facts = opened.status()
    echo(output.as_json(facts) if as_json else output.status_text(facts))


def filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """--path, --since, --until, --tag: which notes a search (query, related) may return."""
    for option in reversed(
        [
            click.option(
                "--path",
                "paths",
                multiple=True,
                shell_complete=lambda ctx, param, incomplete: _vault_paths(incomplete),
                help="Only notes under this folder (projects/) or matching this glob "
                "(daily/2026-11-*.md); repeatable, any may match.",
            ),
            click.option(
                "--since",
                help="Only notes dated on or after: YYYY-MM-DD, today, yesterday, 7d, 2w, 3m.",
            ),
            click.option("--until", help="Only notes dated on or before (same forms as --since)."),
            click.option(
                "--tag",
                "tags",
                multiple=True,
                help="Only notes with this tag (front matter or #inline; a nested tag matches "
                "its parents); repeatable, all must match.",
            ),
        ]
    ):
        command = option(command)
    return command


@main.command()
@click.argument("text")
@reader_options
@number_option("-n", "--limit", kind=int, help="How many results", with_range=True)
@number_option("--min-score", help="Drop results below this calibrated score", with_range=True)
@click.option(
    "--mode",
    type=Setting("mode", "mode", MODES),
    help=f"Which legs to run (default {DEFAULTS.mode}).",
)
@click.option(
    "--decay/--no-decay",
    default=None,
    help="Rank older daily notes lower (half-life --half-life days).",
)
@number_option("--half-life", help="Days for a daily note's score to halve")
@click.option(
    "--mmr/--no-mmr", default=None, help="Diversify results (maximal marginal relevance)."
)
@number_option("--mmr-lambda", help="MMR balance, 1 = relevance only")
@number_option("--vector-weight", help="Weight of the vector leg")
@number_option("--text-weight", help="Weight of the keyword leg")
@click.option(
    "--rerank/--no-rerank",
    default=None,
    help="Let the configured reranker (rerank_url) order the top candidates (default: when set).",
)
@number_option("--rerank-top", kind=int, help="Candidates the reranker reads", with_range=True)
@filter_options
@click.option("--files", is_flag=True, help="Print the matching notes' paths only, best first.")
@click.option("--explain", is_flag=True, help="Show how each score came about.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def query(
    text: str,
    vault: Path | None,
    db: str | None,
    name: str | None,
    paths: tuple[str, ...],
    since: str | None,
    until: str | None,
    tags: tuple[str, ...],
    files: bool,
    explain: bool,
    as_json: bool,
    **flags: Any,
) -> None:
    """Find the notes and exact lines that match TEXT, by keyword and by meaning."""

    from .. import output
    from ..errors import ArgumentError
    from ..memory import Memory, search_request

    config = _config(db=db, name=name, **flags)
    if flags.get("rerank") and not config.rerank_url:
        raise click.UsageError(
            "--rerank needs a reranker: set rerank_url (MEMSYNC_RERANK_URL) to its /rerank URL"
        )
    try:  # a filter or a text that cannot be read is a usage error, exit 2
        asked = search_request(
            config, text, paths=paths, since=since, until=until, tags=tags, explain=explain
        )
    except ArgumentError as exc:
        raise click.UsageError(str(exc)) from exc
    with Memory.open(config, vault) as memory:
        outcome = memory.search(asked.text, asked.options)
        root = memory.vault
    if as_json:
        echo(output.as_json(outcome.as_dict()))
    elif files:
        for notice in outcome.notices:
            echo(f"memsync: note: {notice}", err=True)
        for path in dict.fromkeys(hit.path for hit in outcome.results):
            echo(output.escape_name(path))
    else:
        color = output.wants_color(current().stdout.isatty(), dict(env()))
        if outcome.results or outcome.notices:
            links = root if color else None
            echo(output.query_text(outcome, list(outcome.terms), color, links))
    if not outcome.results:
        shown = text if len(text) <= 80 else text[:77] + "..."
        echo(f"memsync: no results for {shown!r}", err=True)


@main.command()
@click.argument("location", shell_complete=lambda ctx, param, incomplete: _vault_paths(incomplete))
@reader_options
@click.option(
    "--raw", is_flag=True, help="The lines only, as in the file: no line numbers, no escapes."
)
def get(location: str, vault: Path | None, db: str | None, name: str | None, raw: bool) -> None:
    """Print lines of a note: LOCATION is PATH, PATH:N or PATH:N-M, as `query` prints them, or
    '[[Note]]', '[[Note#Heading]]' (that section), '[[Note#^block]]' as a link writes them."""

    from .. import output
    from ..memory import Memory, note_request

    asked = note_request(location, as_printed=True)
    config = _config(db=db, name=name)
    with Memory.open(config, vault) as memory:
        lines = memory.read_location(asked, capped=False)
    if lines.copy:
        echo(f"memsync: note: {output.escape_name(lines.path)}: {lines.copy}", err=True)
    if lines.end_line >= lines.start_line:
        echo(lines.text if raw else output.numbered(lines))


@main.command()
@click.argument("note", shell_complete=lambda ctx, param, incomplete: _vault_paths(incomplete))
@reader_options
@click.option(
    "-n",
    "--limit",
    type=Setting("limit", "integer"),
    help=f"How many notes, {RANGES['limit'].low:g}-{RANGES['limit'].high:g} "
    f"(default {RELATED_LIMIT}).",
)
@filter_options
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def related(
    note: str,
    vault: Path | None,
    db: str | None,
    name: str | None,
    limit: int | None,
    paths: tuple[str, ...],
    since: str | None,
    until: str | None,
    tags: tuple[str, ...],
    as_json: bool,
) -> None:
    """The notes nearest in meaning to NOTE (PATH, PATH:N-M for those lines, or '[[Note]]' as
    `get` takes them), best first, each with the lines that make it related."""

    from .. import output
    from ..errors import ArgumentError
    from ..memory import Memory, note_request, search_options

    config = _config(db=db, name=name)
    try:
        options = search_options(
            config,
            paths=paths,
            since=since,
            until=until,
            tags=tags,
            limit=limit or RELATED_LIMIT,
        )
    except ArgumentError as exc:  # a filter that cannot be read is a usage error, exit 2
        raise click.UsageError(str(exc)) from exc
    with Memory.open(config, vault) as memory:
        answer = memory.related(note_request(note, as_printed=True), options)
        root = memory.vault
    if as_json:
        echo(output.as_json(output.related_result(answer)))
        return
    color = output.wants_color(current().stdout.isatty(), dict(env()))
    if answer.results or answer.notices:
        echo(output.related_text(answer, color, root if color else None))
    if not answer.results:
        echo(f"memsync: no notes related to {output.escape_name(answer.note)}", err=True)


@main.command()
@click.argument("note", required=False)
@reader_options
@click.option("--unresolved", is_flag=True, help="Every link in the vault that opens no note.")
@click.option(
    "--ambiguous",
    is_flag=True,
    help="Every link by a name several notes share, none beside the linking note, and the note "
    "it opens.",
)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def links(
    note: str | None,
    vault: Path | None,
    db: str | None,
    name: str | None,
    unresolved: bool,
    ambiguous: bool,
    as_json: bool,
) -> None:
    """A note's links and the notes that link to it (NOTE: its path or '[[its name]]'), or
    with --unresolved the vault's broken links, with --ambiguous its links by a shared name."""

    from .. import output
    from ..memory import Memory

    if (note is not None) + unresolved + ambiguous != 1:
        raise click.UsageError("give a NOTE, --unresolved or --ambiguous (one of them)")
    with Memory.open(_config(db=db, name=name), vault) as memory:
        if note is None:
            listed = memory.unresolved_links() if unresolved else memory.ambiguous_links()
            data: object = [output.link_dict(link) for link in listed]
            text = output.vault_links_text(listed, "unresolved" if unresolved else "ambiguous")
        else:
            found = memory.links(output.unescape_name(note))
            data, text = output.links_data(found), output.links_text(found)
    echo(output.as_json(data) if as_json else text)


def _vaults_config(db: str | None):  # type: ignore[no-untyped-def]
    """`vaults`' settings: a --db there names a PostgreSQL database (index files are listed
    from the data folder)."""
    from ..config import is_postgres

    if db is not None and not is_postgres(db):
        raise click.UsageError("--db names a postgresql:// database here; index files are listed")
    return _config(db=db)


VAULTS_DB = "A postgresql:// URL: its vaults (env MEMSYNC_DB; default: this user's index files)."


@main.group(invoke_without_command=True)
@click.option("--db", help=VAULTS_DB)
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@click.pass_context
def vaults(ctx: click.Context, db: str | None, as_json: bool) -> None:
    """The indexes this user has on this machine, or with --db URL a PostgreSQL database's
    vaults: each one's folder (and whether it still exists), notes, chunks, vectors waiting,
    size, last sync and writer."""
    if ctx.invoked_subcommand is not None:
        return
    from .. import memory, output

    facts = memory.vaults(_vaults_config(db))
    echo(output.as_json(facts) if as_json else output.vaults_text(facts))


@vaults.command("forget")
@click.argument("target", metavar="PATH|NAME")
@click.option("--db", help=VAULTS_DB)
@click.option("--yes", is_flag=True, help="Ask nothing, even at a terminal.")
def vaults_forget(target: str, db: str | None, yes: bool) -> None:
    """Remove the index of the vault at PATH, or NAME as `memsync vaults` lists it; never a
    note. Refused while a writer (watch, serve, index) holds it, and in PostgreSQL for anyone
    but the vault's owner. Asks first at a terminal; off a terminal, or with --yes, asks nothing."""
    from .. import memory, output

    def confirm(facts: dict[str, Any]) -> bool:
        if yes or not current().stdin.isatty():
            return True
        question = f"Forget the index {output.vault_line(facts)}? The notes stay"
        return bool(click.confirm(question, default=False, err=True))

    facts = memory.forget(_vaults_config(db), target, confirm)
    if facts is None:
        echo("memsync: kept: nothing was removed", err=True)
        raise SystemExit(1)
    where = f" of {facts['vault']}" if facts.get("vault") else ""
    echo(f"forgot the index {facts['name']}{where}; the notes were not touched")


def _vault_paths(incomplete: str) -> list[Any]:
    """Shell completion of a note path: the indexed notes of the vault around the cwd."""
    from click.shell_completion import CompletionItem

    try:
        from ..config import load_config
        from ..memory import Memory

        with Memory.open(load_config()) as memory:
            paths = memory.paths(incomplete)
    except Exception:  # noqa: BLE001 - completion must never print an error
        return []
    return [CompletionItem(p) for p in paths[:200]]


@main.command()
@writer_options
@watch_options
def watch(
    vault: Path,
    db: str | None,
    name: str | None,
    debounce_ms: int | None,
    provider: str | None,
    model: str | None,
    replace: bool,
    verbose: bool,
    quiet: bool,
    log_file: Path | None,
) -> None:
    """Keep VAULT's index in step with every edit until SIGINT/SIGTERM."""

    import signal

    from ..sync.watcher import Watcher

    config = _config(db=db, name=name, debounce_ms=debounce_ms, provider=provider, model=model)
    config = resolved_db(config)
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    memsync_log = _log_to(log_file, level, "watchdog")
    relay = None
    try:
        watcher = Watcher.for_vault(config, vault, replace)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, lambda *_: watcher.request_stop())
        relay = serve_commands.answer_the_shell(watcher.location, main, watcher)
        watcher.run()
    except MemsyncError as exc:
        if log_file:  # whoever reads the log learns why it ends (stderr says it anyway)
            memsync_log.error("stopped: %s", exc)
        raise
    finally:
        if relay is not None:
            relay.stop()
    memsync_log.info("stopped")


@main.command()
@reader_options
@click.option(
    "--writable", is_flag=True, help="Offer memory_write (off by default: the agent only reads)."
)
@click.option(
    "--protect",
    multiple=True,
    help="A glob of notes the agent may never write, beside AGENTS.md, SOUL.md, USER.md, "
    "IDENTITY.md, MEMORY.md and .memsyncignore (repeatable; config: protect).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every tool call (DEBUG).")
@click.option(
    "--log-file", type=click.Path(path_type=Path), help="Append the log here instead of stderr."
)
def mcp(
    vault: Path | None,
    db: str | None,
    name: str | None,
    writable: bool,
    protect: tuple[str, ...],
    verbose: bool,
    log_file: Path | None,
) -> None:
    """Serve the vault to an AI agent over MCP on stdio until stdin closes or SIGTERM/SIGINT."""

    import signal

    try:
        from ..agent.server import MemoryServer, serve
    except ImportError as exc:
        raise MemsyncError(
            f"memsync mcp needs the MCP SDK ({exc.name} is missing): {MCP_INSTALL}"
        ) from exc

    from ..daemon import session as relayed
    from ..memory import Memory

    config = _config(db=db, name=name, protect=protect or None, writable=writable or None)
    level = logging.DEBUG if verbose else logging.INFO
    session = relayed.current()
    streams = current().streams
    if session is None:
        _log_to(log_file, level, "mcp")
    else:
        session.log_to(_log_handler(log_file, level))

    first = _first_index(config, vault) if session is None else None

    def open_memory() -> Memory:
        if first is not None:
            first.wait_ready()
        return Memory.open(config, vault, long_lived=True)

    server = MemoryServer(config, open_memory, config.writable, config.protect)
    server.check_writable()

    def serve_until_stdin_closes() -> None:
        serve(server, streams)
        logging.getLogger("memsync").info("stopped (stdin closed)")

    if session is not None:  # a daemon's: it serves once this index is known to be its own
        _open_or_decline(server)
        session.serve_mcp(serve_until_stdin_closes)
        return
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda number, _: server.exit_now(signal.Signals(number).name))
    try:
        serve_until_stdin_closes()
    finally:
        if first is not None:
            first.request_stop()


def _first_index(config: Config, vault: Path | None) -> Watcher | None:
    """`mcp --vault` of a vault never indexed (the first start of a one-step install, which has
    no shell to run `memsync index` in): a watcher indexes it for the session, text before the
    first answer and vectors in the background, and keeps it in step while the session lasts.
    None where the vault has an index (the server reads it, as always) or no vault is named."""
    import threading

    from ..memory import unindexed
    from ..sync.watcher import Watcher

    if vault is None or not unindexed(config, vault):
        return None
    watcher = Watcher.for_vault(config, vault, command="mcp")
    log = logging.getLogger("memsync")
    log.info("%s has no index yet: indexing it for this session", watcher.root)

    def run() -> None:
        try:
            watcher.run()
        except MemsyncError as exc:  # another writer began first, the vault went: say so once
            log.warning("the first index stopped: %s", exc)
        finally:
            watcher.stop.set()
            watcher.ready.set()  # a call waiting for it reads whatever index there is

    threading.Thread(target=run, name="memsync-first-index", daemon=True).start()
    return watcher


def _open_or_decline(server: Any) -> None:
    """A daemon serves an MCP session only for its own index, opened before the session starts;
    whatever else (another index, one that cannot be opened) its client's own process answers."""
    from ..memory import NotServedHere

    try:
        server.connections.memory()
    except MemsyncError as exc:
        raise NotServedHere(str(exc)) from exc


main.add_command(serve_commands.serve)
main.add_command(serve_commands.token)
main.add_command(service_commands.service)
