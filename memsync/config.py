"""Settings: config file < environment (MEMSYNC_*) < command-line flags, frozen once read."""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
import urllib.parse
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .redact import is_conninfo, redact, redact_login, redacted
from .text import as_text, is_utf8

# -- whose command this is ------------------------------------------------------------------------
# A command in a process of its own reads its process's environment and folder and writes to its
# standard streams. One a daemon runs for this user's shell (serve/relay.py) has its client's,
# set for the thread (and the tasks it starts) that runs it, while the daemon's own threads (the
# watcher, the HTTP side, other clients' commands) go on with the daemon's: nothing in memsync
# writes the process's environment, changes its folder or replaces its streams.


@dataclass(frozen=True)
class Invocation:
    env: Mapping[str, str]
    cwd: Path  # a relayed client's, absolute; `.` in a process of its own (its folder, found
    # by the system when a path is used: a folder deleted under the shell is no error until then)
    # what holds the command's stdout, stderr and stdin: a relayed command's session, else `sys`
    # (read when written to: a test's capture replaces them)
    streams: Any = field(default=sys, compare=False)

    @property
    def stdout(self) -> Any:
        return self.streams.stdout

    @property
    def stderr(self) -> Any:
        return self.streams.stderr

    @property
    def stdin(self) -> Any:
        return self.streams.stdin

    def path(self, given: str | os.PathLike[str]) -> Path:
        """`given` (a flag's or a variable's path) as this command's shell means it: `~` by its
        HOME, a relative path from its folder."""
        return self.cwd / self.expanded(given)

    def expanded(self, given: str | os.PathLike[str]) -> Path:
        """`given` with `~` by this command's HOME (relative paths stay so, for messages)."""
        text = os.fspath(given)
        home = self.env.get("HOME")
        if home and (text == "~" or text.startswith("~/")):
            text = home + text[1:]
        return Path(os.path.expanduser(text))  # ~user, or ~ without HOME


_CLIENT: ContextVar[Invocation | None] = ContextVar("memsync_invocation", default=None)
# this process's own command: its environment read live, its folder found when a path is used
_OWN = Invocation(os.environ, Path(os.curdir))


def current() -> Invocation:
    """The command being run here: a relayed client's, else this process's own (read, never
    written)."""
    return _CLIENT.get() or _OWN


def env() -> Mapping[str, str]:
    return current().env


@contextmanager
def on_behalf_of(invocation: Invocation) -> Iterator[None]:
    """While it lasts, on this thread and the tasks it starts: `invocation`'s command."""
    token = _CLIENT.set(invocation)
    try:
        yield
    finally:
        _CLIENT.reset(token)


PROVIDERS = ("auto", "local", "openai", "ollama", "none")
MODES = ("hybrid", "vector", "keyword", "rrf")
RELATED_LIMIT = 10  # the related notes listed unless asked for another number (not `limit`'s 6)
RERANK_APIS = ("jina", "tei")
OPENAI_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Range:
    """The values a numeric setting admits: finite, low..high, `low` itself only if not open."""

    low: float
    high: float
    low_open: bool = False

    def admits(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.low_open else value >= self.low
        return above and value <= self.high

    def __str__(self) -> str:
        if self.low_open:
            return f"above {self.low:g} and at most {self.high:g}"
        return f"between {self.low:g} and {self.high:g}"


# every numeric setting, checked the same way in the config file, the environment and flags
RANGES = {
    "max_file_mb": Range(0, 10240, low_open=True),
    "batch_size": Range(1, 4096),
    "requests_in_flight": Range(1, 64),
    "http_timeout": Range(0, 3600, low_open=True),
    "query_timeout": Range(0, 600, low_open=True),
    "limit": Range(1, 1000),
    "min_score": Range(0, 1),
    "half_life": Range(0, 36500, low_open=True),
    "mmr_lambda": Range(0, 1),
    "vector_weight": Range(0, 100),
    "text_weight": Range(0, 100),
    "rerank_top": Range(1, 200),
    "debounce_ms": Range(0, 60000),
    "reconcile_minutes": Range(0, 10080, low_open=True),
    "ef_search": Range(100, 1000),  # at least the 100 chunks a query's first step keeps
}


# PostgreSQL's HNSW search list: recall of the exact top 10 against latency, the point past which
# a longer list buys little (benchmarks/NOTES.md); pgvector allows at most 1,000
EF_SEARCH = 400
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# a schema name PostgreSQL takes without surprises, and not one of its own
VAULT_NAME = re.compile(r"[a-z0-9_][a-z0-9_-]{0,49}")
RESERVED_NAMES = frozenset({"public", "memsync", "information_schema"})


def is_postgres(db: str) -> bool:
    """A postgresql:// URL or a libpq `host=... dbname=...` string, not a SQLite file."""
    return db.startswith(POSTGRES_SCHEMES) or is_conninfo(db)


def checked_name(name: str) -> str:
    """A vault's name in a PostgreSQL database (its schema), or ConfigError saying what is not."""
    if not VAULT_NAME.fullmatch(name) or name in RESERVED_NAMES or name.startswith("pg_"):
        raise ConfigError(
            f"--name {name!r} cannot name a vault: use 1-50 lower-case letters, digits, _ or -, "
            "not public, memsync or pg_*",
            ("name",),
        )
    return name


def checked_rerank_url(url: str) -> str:
    """`url`, or ConfigError (exit 2) when no request could ever be sent to it, said when the
    settings are read rather than by every query."""
    problem = _url_problem(url)
    if problem:
        raise ConfigError(
            f"rerank_url {redact_login(url)} cannot be used: {problem}",
            ("rerank_url",),
            usage=True,
        )
    return url


def _url_problem(url: str) -> str:
    """What keeps a request from ever being sent to `url` ("" when nothing does), by the rules
    httpx applies; httpx's own refusal of the rest (a host IDNA cannot encode) is a notice."""
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        return "it holds a control character"
    if not redacted(url).certain:  # where it would split, a password's characters would show
        return "it cannot be read as one URL: percent-encode any @ / ? # in its user and password"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:  # an unclosed [, a port that is no number
        return str(exc)
    if parts.scheme not in ("http", "https"):
        return "it must be an http:// or https:// URL"
    if not parts.hostname:
        return "it names no host"
    if port == 0:
        return "port 0 cannot be reached"
    return ""


@dataclass(frozen=True)
class Config:
    """Every setting memsync reads; docs/configuration.md's table documents each field."""

    provider: str = "auto"
    model: str | None = None
    db: str | None = None  # a SQLite file, a postgresql:// URL or a libpq key=value string
    name: str | None = None  # the vault's name in a PostgreSQL database
    max_file_mb: float = 10.0
    batch_size: int = 32
    requests_in_flight: int = 4  # HTTP providers: batches sent at once while indexing
    openai_base_url: str = OPENAI_URL
    ollama_host: str = "http://127.0.0.1:11434"
    http_timeout: float = 60.0
    query_timeout: float = 5.0  # seconds a query waits for its embedding, retries included
    # query defaults
    limit: int = 6
    min_score: float = 0.35
    mode: str = "hybrid"
    decay: bool = False
    half_life: float = 30.0
    mmr: bool = False
    mmr_lambda: float = 0.7
    vector_weight: float = 0.7
    text_weight: float = 0.3
    ef_search: int = EF_SEARCH
    # an optional rerank stage: a /rerank endpoint, off unless set
    rerank_url: str | None = None
    rerank_model: str = ""
    rerank_api: str = "jina"  # jina (Jina, Cohere, llama.cpp, vLLM, Infinity) | tei
    rerank_top: int = 20  # candidates sent to the reranker
    rerank: bool = True  # rerank when rerank_url is set; --no-rerank skips it
    # agents (memsync mcp): globs of notes an agent may never write, beside the built-in ones
    protect: tuple[str, ...] = ()
    # watcher
    debounce_ms: int = 300
    reconcile_minutes: float = 10.0

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(
                f"unknown provider {self.provider!r}: choose one of {', '.join(PROVIDERS)}",
                ("provider",),
            )
        if self.mode not in MODES:
            raise ConfigError(
                f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}", ("mode",)
            )
        if self.rerank_api not in RERANK_APIS:
            raise ConfigError(
                f"unknown rerank_api {self.rerank_api!r}: choose one of {', '.join(RERANK_APIS)}",
                ("rerank_api",),
            )
        if self.rerank_url is not None:
            checked_rerank_url(self.rerank_url)
        for name, allowed in RANGES.items():
            value = getattr(self, name)
            if not allowed.admits(value):
                raise ConfigError(f"{name} must be {allowed}, not {value!r}", (name,))
        if self.db is not None and "://" in self.db and not is_postgres(self.db):
            raise ConfigError(
                f"db must be a SQLite file or a postgresql:// URL, not {redact(self.db)!r}",
                ("db",),
            )
        if self.name is not None:
            checked_name(self.name)
        if self.vector_weight + self.text_weight == 0:
            raise ConfigError(
                "vector_weight and text_weight cannot both be 0", ("vector_weight", "text_weight")
            )

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1024 * 1024)


def config_path() -> Path:
    invocation = current()
    if invocation.env.get("MEMSYNC_CONFIG"):
        return invocation.path(invocation.env["MEMSYNC_CONFIG"])
    return _user_dir("XDG_CONFIG_HOME", ".config", invocation) / "config.toml"


def data_dir() -> Path:
    """Where indexes live: outside every vault, so sync tools and git never see them."""
    invocation = current()
    if invocation.env.get("MEMSYNC_HOME"):
        return invocation.path(invocation.env["MEMSYNC_HOME"])
    return _user_dir("XDG_DATA_HOME", ".local/share", invocation)


def _user_dir(variable: str, default: str, invocation: Invocation) -> Path:
    """memsync's folder of this user's config or data, as platformdirs places it, by the
    command's own environment where the platform reads one (XDG_*_HOME: Linux, the BSDs)."""
    if sys.platform in ("darwin", "win32"):
        import platformdirs

        kind = "config" if variable == "XDG_CONFIG_HOME" else "data"
        return Path(getattr(platformdirs, f"user_{kind}_dir")("memsync"))
    base = invocation.env.get(variable, "").strip() or f"~/{default}"
    return invocation.path(base) / "memsync"


def resolved_db(config: Config) -> Config:
    """A daemon's settings with its --db file made absolute, once, at its start: the index it
    serves and keys its endpoint by, whatever folder a command it later runs for a client is in.
    """
    if config.db is None or is_postgres(config.db):
        return config
    return replace(config, db=os.path.abspath(current().path(config.db)))


def make_private_folder(path: Path) -> None:
    """Make `path` and every missing folder above it, each this user's alone whatever the umask
    (they hold the notes' text and the token file, which a folder others may write would void);
    folders that exist are left as they are."""
    missing: list[Path] = []
    while not path.is_dir():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:  # made at the same moment by another process
            pass


def default_db_path(vault: Path) -> Path:
    """One database per vault, named after the folder and a hash of its real path."""
    real = os.path.realpath(vault)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(real).name).strip("-") or "vault"
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return data_dir() / "vaults" / f"{slug}-{digest}.sqlite"


# how a message names what a setting's value must be
KIND_WORDS = {"int": "a whole number", "float": "a number", "bool": "true or false"}


def _coerce(name: str, raw: Any, kind: Any) -> Any:
    kind = str(kind)
    try:
        if kind.startswith("bool"):
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if kind.startswith("int"):
            return int(raw)
        if kind.startswith("float"):
            return float(raw)
        if kind.startswith("tuple"):  # a TOML list, or commas in an environment variable
            items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
            texts = (str(item).strip() for item in items)
            return tuple(utf8_text(t, f"setting {name}:", (name,)) for t in texts if t)
        return utf8_text(str(raw), f"setting {name}:", (name,))
    except ValueError as exc:
        written = kind.split()[0]  # "int | None" -> "int"
        wanted = KIND_WORDS.get(written, written)
        raise ConfigError(f"setting {name}: cannot read {raw!r} as {wanted}") from exc


def utf8_text(value: str, what: str, settings: tuple[str, ...] = ()) -> str:
    """`value`, refused when it holds bytes that are not UTF-8 (a flag or variable typed in a
    terminal of another encoding): deep inside a database driver or the model it would fail
    with a traceback, since the index keeps paths and queries as text."""
    if not is_utf8(value):
        raise ConfigError(f"{what} {as_text(value)} is not UTF-8 text", settings)
    return value


def load_config(**flags: Any) -> Config:
    """Merge the config file, MEMSYNC_* variables and the flags that were given (not None)."""
    kinds = {f.name: f.type for f in fields(Config)}
    values: dict[str, Any] = {}
    path = config_path()
    if path.is_file():
        data = _read_toml(path)
        unknown = sorted(set(data) - set(kinds))
        if unknown:
            raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}")
        values.update(data)
    variables = current().env
    for name, env_name in (("openai_base_url", "OPENAI_BASE_URL"), ("ollama_host", "OLLAMA_HOST")):
        if variables.get(env_name):
            values[name] = variables[env_name]
    for name in kinds:
        env = variables.get(f"MEMSYNC_{name.upper()}")
        if env:
            values[name] = env
    values.update({k: v for k, v in flags.items() if v is not None})
    return Config(**{k: _coerce(k, v, kinds[k]) for k, v in values.items()})


def _read_toml(path: Path) -> dict[str, Any]:
    """The config file's settings (the TOML parser is loaded only where there is a file)."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def read_setting(name: str, written: object) -> Any:
    """One setting as a flag, a query parameter, a form field or a tool's argument gives it,
    read and checked as the config file's are: a bad value is the same ConfigError, and so the
    same message, on every face."""
    return getattr(overridden(Config(), **{name: str(written)}), name)


def overridden(config: Config, **texts: str | None) -> Config:
    """`config` with some settings given as text (an HTTP request's parameters), read and checked
    as the config file's and the environment's are; None leaves a setting as it is."""
    kinds = {f.name: f.type for f in fields(Config)}
    given = {
        name: _coerce(name, text, kinds[name]) for name, text in texts.items() if text is not None
    }
    return replace(config, **given)
