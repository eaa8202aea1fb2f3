"""What memsync's click modules share: the error boundary, settings from flags, the numeric flag
type, the options of the commands that write an index, and the log of the long-running ones."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..config import RANGES, Config, current, env, read_setting
from ..errors import AmbiguousIndex, ConfigError, MemsyncError

# what `mcp` and `serve` need, as a command that works wherever memsync came from (a clone, not a
# package index): the SDK that the mcp extra pins in pyproject.toml
MCP_INSTALL = "pip install 'mcp>=2.3,<3'"


def _fail(exc: MemsyncError) -> None:
    if env().get("MEMSYNC_RAISE_ERRORS"):
        raise exc
    echo(_one_line(f"memsync: error: {exc}"), err=True)
    usage = isinstance(exc, AmbiguousIndex) or (isinstance(exc, ConfigError) and exc.usage)
    sys.exit(2 if usage else 1)


def echo(message: str, err: bool = False) -> None:
    """click.echo to the command's own stdout or stderr: a relayed command's are its client's."""
    invocation = current()
    click.echo(message, file=invocation.stderr if err else invocation.stdout)


def _one_line(message: str) -> str:
    """An error may quote a note's name or an argument: its control characters as escapes."""
    from ..output import escape_controls

    return escape_controls(message)


class Bounded(click.Command):
    """A memsync command: it runs inside the boundary."""

    def invoke(self, ctx: click.Context) -> Any:
        return within_the_boundary(lambda: super(Bounded, self).invoke(ctx))


class BoundedGroup(click.Group):
    """A group of memsync commands: its own callback (`memsync vaults` alone) and each of its
    commands run inside the boundary."""

    command_class = Bounded
    group_class = type  # a group's groups are bounded too

    def invoke(self, ctx: click.Context) -> Any:
        return within_the_boundary(lambda: super(BoundedGroup, self).invoke(ctx))


def within_the_boundary(action: Callable[[], Any]) -> Any:
    """The boundary: MemsyncError -> one line and exit 1; anything else is a bug and says so."""
    try:
        return action()
    except KeyboardInterrupt:
        echo("memsync: interrupted", err=True)
        sys.exit(130)
    except MemsyncError as exc:
        _fail(exc)
    except (click.exceptions.Abort, click.exceptions.Exit):
        raise  # click's own ends (a prompt answered with Ctrl-D, ctx.exit): click says them
    except Exception as exc:
        if env().get("MEMSYNC_RAISE_ERRORS"):
            raise
        if not isinstance(exc, (OSError, RuntimeError)):
            raise  # a bug: its traceback is what a report needs
        echo(_one_line(f"memsync: error: {exc.__class__.__name__}: {exc}"), err=True)
        sys.exit(1)


def _config(**flags: Any):  # type: ignore[no-untyped-def]
    from ..config import is_postgres, load_config  # lazily, like every import here

    try:
        config = load_config(**flags)
    except ConfigError as exc:  # a bad flag (a bad --name too) is a usage error, exit 2
        if any(flags.get(name) is not None for name in exc.settings):
            raise click.UsageError(str(exc)) from exc
        raise
    if flags.get("name") is not None and not (config.db and is_postgres(config.db)):
        raise click.UsageError("--name names a vault in a PostgreSQL database: add --db URL")
    return config


class Setting(click.ParamType):  # type: ignore[type-arg]
    """A flag that sets a setting, read and checked at parse time as every face reads it
    (config.read_setting): a bad one exits 2 with the message the API and MCP give."""

    def __init__(self, setting: str, name: str, choices: tuple[str, ...] = ()) -> None:
        self.setting = setting
        self.name = name
        self.choices = choices

    def get_metavar(self, param: Any, ctx: Any = None) -> str | None:
        return f"[{'|'.join(self.choices)}]" if self.choices else None

    def shell_complete(self, ctx: Any, param: Any, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(c) for c in self.choices if c.startswith(incomplete)]

    def convert(self, value: Any, param: Any, ctx: Any) -> Any:
        try:
            return read_setting(self.setting, value)
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


class _Message(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        echo(_one_line(f"memsync: {record.getMessage()}"), err=True)


def writer_options(command: Callable[..., None]) -> Callable[..., None]:
    """VAULT, --db, --name, --provider, --model, --replace: what index and watch share."""
    return writer_flags(click.argument("vault", type=click.Path(path_type=Path))(command))


def writer_flags(command: Callable[..., None]) -> Callable[..., None]:
    """writer_options without VAULT (serve's is optional: --db alone serves a shared vault)."""
    for option in reversed(
        [
            click.option(
                "--db",
                help="Index file, or a postgresql:// URL (default: a file per vault in the data "
                "folder; env MEMSYNC_DB).",
            ),
            click.option(
                "--name",
                help="The vault's name in a PostgreSQL database (default: its folder's name).",
            ),
            click.option(
                "--provider",
                type=click.Choice(["auto", "local", "openai", "ollama", "none"]),
                help="Embedding provider (env MEMSYNC_PROVIDER; default auto = local if "
                "installed, else none).",
            ),
            click.option("--model", help="Embedding model of the provider (env MEMSYNC_MODEL)."),
            click.option(
                "--replace",
                is_flag=True,
                help="The vault moved to VAULT: let it take over an index built from another "
                "folder or host (without it, such an index is refused).",
            ),
        ]
    ):
        command = option(command)
    return command


DEFAULTS = Config()  # what a flag left out means: the help says it, from the one declaration


def number_option(
    *decls: str, kind: type = float, help: str, with_range: bool = False
) -> Callable[..., Any]:
    """A numeric flag, checked at parse time against its setting's range (a bad one exits 2);
    the setting is the flag's own name unless a parameter name is given. The help ends with the
    setting's default (and, `with_range`, its range), as Config and RANGES declare them."""
    names = [d for d in decls if not d.startswith("-")]
    setting = names[0] if names else decls[-1].lstrip("-").replace("-", "_")
    span = RANGES[setting]
    bounds = f", {span.low:g}-{span.high:g}" if with_range else ""
    text = f"{help}{bounds} (default {getattr(DEFAULTS, setting):g})."
    return click.option(
        *decls, type=Setting(setting, "integer" if kind is int else "number"), help=text
    )


def watch_options(command: Callable[..., None]) -> Callable[..., None]:
    """--debounce, -v, -q, --log-file: what watch and serve share beside the writer's options."""
    for option in reversed(
        [
            number_option(
                "--debounce",
                "debounce_ms",
                kind=int,
                help="Quiet time in ms before a batch of changes is applied",
            ),
            click.option("-v", "--verbose", is_flag=True, help="Log every event (DEBUG)."),
            click.option("-q", "--quiet", is_flag=True, help="Log warnings and errors only."),
            click.option(
                "--log-file",
                type=click.Path(path_type=Path),
                help="Append the log here instead of stderr.",
            ),
        ]
    ):
        command = option(command)
    return command


MAX_LOG_LINE = 500  # characters: a library's message naming thousands of paths stays one short line


class _ShortLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return "\n".join(
            line
            if len(line) <= MAX_LOG_LINE
            else f"{line[:MAX_LOG_LINE]}... ({len(line) - MAX_LOG_LINE} more characters)"
            for line in super().format(record).split("\n")
        )


def _log_handler(log_file: Path | None, level: int) -> logging.Handler:
    """A log on stderr or appended to a file, a record a line (or a few), never stdout."""
    handler = (
        logging.FileHandler(current().path(log_file))
        if log_file
        else logging.StreamHandler(current().stderr)
    )
    handler.setFormatter(_ShortLines("%(asctime)s %(levelname)s %(message)s"))
    handler.setLevel(level)
    return handler


def _log_to(log_file: Path | None, level: int, *others: str) -> Any:
    """memsync's log (and the named libraries') on stderr or appended to a file, never stdout."""
    handler = _log_handler(log_file, level)
    memsync_log = logging.getLogger("memsync")
    for message in [h for h in memsync_log.handlers if isinstance(h, _Message)]:
        memsync_log.removeHandler(message)
    memsync_log.addHandler(handler)
    memsync_log.setLevel(level)
    memsync_log.propagate = False  # a library's root handler must not print it twice
    for name in others:
        logging.getLogger(name).addHandler(handler)
    return memsync_log
