"""The `memsync serve` and `memsync token` commands: parse flags, then one call on the server
room (daemon.runner, web.app) or on the token file; and the relay that `serve` and `watch` start to
answer this user's shell. The web stack is imported only once `serve` runs, so that every other
command starts without it."""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ..config import Config, current, resolved_db
from ..errors import ConfigError, MemsyncError
from ..redact import redact
from ..web.listen import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    Listen,
    allowed_hosts,
    check_local,
    cookie_name,
    parse_listen,
)
from .common import (
    MCP_INSTALL,
    Bounded,
    BoundedGroup,
    _config,
    _log_to,
    echo,
    watch_options,
    writer_flags,
)

if TYPE_CHECKING:
    from ..daemon.relay import Relay
    from ..store.locate import Location
    from ..sync.watcher import Watcher
    from ..web.tokens import Tokens

log = logging.getLogger("memsync.relay")

DEFAULT_TOKEN = "default"  # the token the first `serve` on a terminal makes


def _listen(text: str | None) -> Listen:
    """The --listen address, a usage error unless this machine has it."""
    try:
        listen = parse_listen(text or f"{DEFAULT_HOST}:{DEFAULT_PORT}")
        check_local(listen)
        return listen
    except ConfigError as exc:
        raise click.UsageError(str(exc)) from exc


def _web_stack() -> None:
    """The MCP SDK brings starlette and uvicorn: without it, one line says what to install (looked
    for, not imported: the server's modules import them)."""
    for library in ("mcp", "starlette", "uvicorn"):
        if importlib.util.find_spec(library) is None:
            raise MemsyncError(
                f"memsync serve needs the MCP SDK ({library} is missing): {MCP_INSTALL}"
            )


def _tokens() -> Tokens:
    """This user's token file; its module (and `secrets`) loads only for serve and token, not for
    every command the group holds."""
    from ..web.tokens import Tokens

    return Tokens()


def _on_a_terminal() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _first_token(tokens: Tokens, writable: bool) -> str | None:
    """With no token stored, on a terminal: a new one named default, to be shown once; without a
    terminal (a service) a token is never printed, so there is none to admit anyone: an error."""
    if tokens.all():
        return None
    if not _on_a_terminal():
        raise MemsyncError(
            "no token yet, and a token is never printed without a terminal: make one with "
            "memsync token add NAME (it prints the token once), then start memsync serve again"
        )
    return tokens.add(DEFAULT_TOKEN, write=writable)


@click.command(cls=Bounded)
@click.argument("vault", required=False, type=click.Path(path_type=Path))
@writer_flags
@watch_options
@click.option(
    "--listen",
    help=f"HOST:PORT to listen on (default {DEFAULT_HOST}:{DEFAULT_PORT}, this machine only), an "
    "address this machine has; another than loopback (0.0.0.0: all) is reachable from the network.",
)
@click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    help="A name clients reach this server by (the Host header), beside loopback and the "
    "--listen host: a DNS name or a proxy's; repeatable.",
)
@click.option(
    "--writable",
    is_flag=True,
    help="Offer memory_write to write tokens' agents (only on the vault's host; read tokens "
    "never write).",
)
@click.option(
    "--tls-cert",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Serve HTTPS with this certificate (PEM), with --tls-key.",
)
@click.option(
    "--tls-key", type=click.Path(path_type=Path, dir_okay=False), help="The certificate's key."
)
def serve(
    vault: Path | None,
    db: str | None,
    name: str | None,
    provider: str | None,
    model: str | None,
    replace: bool,
    debounce_ms: int | None,
    verbose: bool,
    quiet: bool,
    log_file: Path | None,
    listen: str | None,
    allow_hosts: tuple[str, ...],
    writable: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """Serve the index over HTTP to agents (MCP) and browsers, behind tokens: with VAULT, also
    keep it in step as `watch` does; with --db URL [--name NAME] alone, serve a shared
    PostgreSQL vault from any machine, reading only. Until SIGINT/SIGTERM."""
    if vault is None and db is None:
        raise click.UsageError("give VAULT to watch and serve, or --db URL to serve a shared vault")
    if (tls_cert is None) != (tls_key is None):
        raise click.UsageError("--tls-cert and --tls-key go together")
    where = _listen(listen)
    tls = (tls_cert, tls_key) if tls_cert and tls_key else None

    _web_stack()
    config = resolved_db(
        _config(db=db, name=name, debounce_ms=debounce_ms, provider=provider, model=model)
    )
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    _log_to(log_file, level, "watchdog", "uvicorn")
    _serve(config, vault, replace, where, allow_hosts, writable, tls)


def _serve(
    config: Config,
    vault: Path | None,
    replace: bool,
    where: Listen,
    allow_hosts: tuple[str, ...],
    writable: bool,
    tls: tuple[Path, Path] | None,
) -> None:
    from ..agent.server import MemoryServer
    from ..daemon import runner
    from ..memory import Memory
    from ..sync.watcher import Watcher
    from ..web import app as web_app
    from ..web.prefix import page_prefix

    tokens = _tokens()
    tokens.all()  # a token file that cannot be trusted (or read) refuses the start, first
    watcher = Watcher.for_vault(config, vault, replace, "serve") if vault is not None else None
    root = watcher.root if watcher is not None else None
    slots = max(2, os.cpu_count() or 1)  # one slow call (a reranker, an embedding) waits alone
    server = MemoryServer(
        config, lambda: Memory.open(config, root, long_lived=True), writable, config.protect, slots
    )
    server.check_writable()
    prefix = page_prefix(tokens.path.parent)
    app = web_app.make_app(
        server,
        tokens,
        hosts=allowed_hosts(where, allow_hosts),
        cookie=cookie_name(where.port),
        tls=tls is not None,
        slots=slots,
        prefix=prefix,
    )
    uvicorn = runner.uvicorn_server(app, tls)
    sock = runner.bind(where)
    first = _first_token(tokens, writable)  # made once nothing else can fail before it is shown
    if not where.loopback and tls is None:
        click.echo(
            f"memsync: --listen {where} is reachable from the network, and tokens travel in clear "
            "text without --tls-cert (or a TLS proxy in front)",
            err=True,
        )
    page = f"{where.address(tls is not None)}{prefix}/"
    if first is not None:
        click.echo(
            f"memsync: no token yet, so one named {DEFAULT_TOKEN} was made; it is shown this "
            f"once (memsync token add makes others):\n{first}\n"
            f"memsync: log in from a browser here: {page}login?token={first}"
        )
    elif _on_a_terminal():  # the page's address is given to this user only, not to a log
        click.echo(f"memsync: the search page: {page}")
    kind = "writable" if writable else "read-only"
    served = root or redact(config.db or "")
    what = f"serving {served} on {where.listening(tls is not None)} ({kind})"
    relay = _answer_the_shell(config, watcher)
    try:
        runner.run(uvicorn, sock, watcher, what)
    finally:
        if relay is not None:
            relay.stop()
        server.close()


def _answer_the_shell(config: Config, watcher: Watcher | None) -> Relay | None:
    """This user's shell answered for the served index: the watched one once the watcher holds
    it, else the one every call opens, from now on; None when that one is not found (then each
    call says why, and so does each command in its own process)."""
    from ..store.locate import locate

    cli = click.get_current_context().find_root().command
    if watcher is not None:
        return answer_the_shell(watcher.location, cli, watcher)
    try:
        served = locate(config, None)  # as Memory.open finds it
    except MemsyncError as exc:
        log.info("not answering the shell: %s", exc)
        return None
    return answer_the_shell(served, cli)


def _relayed(cli: Any, args: list[str], program: str) -> None:
    """`cli` run for a relayed command as in its own process, click's own messages (a usage
    error) on the command's stderr, not this process's; it exits."""
    try:
        code = cli.main(args, program, standalone_mode=False)
    except click.ClickException as exc:
        exc.show(file=current().stderr)
        sys.exit(exc.exit_code)
    except click.Abort:
        echo("Aborted!", err=True)
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)


def answer_the_shell(index: Location, cli: Any, watcher: Watcher | None = None) -> Relay:
    """This user's query, get, status and mcp for `index` (and `memsync index`, which `watcher`,
    this process's writer of it, runs), answered in this process by `cli`: from now on, or
    once the watcher holds the index (never if it stops first); until then they run in their
    own processes."""
    import threading

    from ..daemon.relay import Relay

    relay = Relay(index, lambda args, program: _relayed(cli, args, program), watcher)
    if watcher is None:
        return relay.start()

    def start() -> None:
        if watcher.wait_ready():
            relay.start()

    threading.Thread(target=start, name="memsync-relay-start", daemon=True).start()
    return relay


@click.group(cls=BoundedGroup)
def token() -> None:
    """Make, list and revoke the tokens `memsync serve` admits (one file for all of this user's
    servers; a running server sees a change at its next request)."""


@token.command("add")
@click.argument("name")
@click.option("--write", is_flag=True, help="May call memory_write on a --writable server.")
@click.option("--json", "as_json", is_flag=True, help='Print {"token": ...}.')
def token_add(name: str, write: bool, as_json: bool) -> None:
    """Make a token named NAME and print it, alone, this once (it is stored hashed)."""

    from .. import output

    secret = _tokens().add(name, write=write)
    click.echo(output.as_json({"token": secret}) if as_json else secret)


@token.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
def token_list(as_json: bool) -> None:
    """The tokens' names, kinds, when made and last used (never the tokens)."""

    from .. import output

    listed = [token.listed() for token in _tokens().all()]
    click.echo(output.as_json({"tokens": listed}) if as_json else output.tokens_text(listed))


@token.command("revoke")
@click.argument("name")
def token_revoke(name: str) -> None:
    """End the token NAME now, for running servers too, with the browser sessions it opened."""

    _tokens().revoke(name)
    click.echo(f"revoked {name}")
