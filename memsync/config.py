"""Settings: config file < environment (MEMSYNC_*) < command-line flags, frozen once read."""

from __future__ import annotations

import hashlib
import os
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PROVIDERS = ("auto", "local", "openai", "ollama", "none")
MODES = ("hybrid", "vector", "keyword", "rrf")


@dataclass(frozen=True)
class Config:
    """Every setting memsync reads; the README's configuration table documents each field."""

    provider: str = "auto"
    model: str | None = None
    db: Path | None = None
    max_file_mb: float = 10.0
    batch_size: int = 32
    openai_base_url: str = "https://api.openai.com/v1"
    ollama_host: str = "http://127.0.0.1:11434"
    http_timeout: float = 60.0
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
    # watcher
    debounce_ms: int = 300
    reconcile_minutes: float = 10.0

    def __post_init__(self) -> None:
        if self.provider not in PROVIDERS:
            raise ConfigError(
                f"unknown provider {self.provider!r}: choose one of {', '.join(PROVIDERS)}"
            )
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.max_file_mb <= 0 or self.batch_size <= 0 or self.limit <= 0:
            raise ConfigError("max_file_mb, batch_size and limit must be positive")
        if self.half_life <= 0:
            raise ConfigError("half_life must be a positive number of days")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError("mmr_lambda must be between 0 and 1")
        if (
            self.vector_weight < 0
            or self.text_weight < 0
            or (self.vector_weight + self.text_weight == 0)
        ):
            raise ConfigError("vector_weight and text_weight must be >= 0 and not both 0")

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 1024 * 1024)


def config_path() -> Path:
    if os.environ.get("MEMSYNC_CONFIG"):
        return Path(os.environ["MEMSYNC_CONFIG"]).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("memsync")) / "config.toml"


def data_dir() -> Path:
    """Where indexes live: outside every vault, so sync tools and git never see them."""
    if os.environ.get("MEMSYNC_HOME"):
        return Path(os.environ["MEMSYNC_HOME"]).expanduser()
    import platformdirs

    return Path(platformdirs.user_data_dir("memsync"))


def default_db_path(vault: Path) -> Path:
    """One database per vault, named after the folder and a hash of its real path."""
    real = os.path.realpath(vault)
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(real).name).strip("-") or "vault"
    digest = hashlib.sha256(real.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return data_dir() / "vaults" / f"{slug}-{digest}.sqlite"


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
        if kind.startswith("Path"):
            return Path(str(raw)).expanduser()
        return str(raw)
    except ValueError as exc:
        raise ConfigError(f"setting {name}: cannot read {raw!r} as {kind.split()[0]}") from exc


def load_config(**flags: Any) -> Config:
    """Merge the config file, MEMSYNC_* variables and the flags that were given (not None)."""
    kinds = {f.name: f.type for f in fields(Config)}
    values: dict[str, Any] = {}
    path = config_path()
    if path.is_file():
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        unknown = sorted(set(data) - set(kinds))
        if unknown:
            raise ConfigError(f"config file {path}: unknown setting(s) {', '.join(unknown)}")
        values.update(data)
    for name, env_name in (("openai_base_url", "OPENAI_BASE_URL"), ("ollama_host", "OLLAMA_HOST")):
        if os.environ.get(env_name):
            values[name] = os.environ[env_name]
    for name in kinds:
        env = os.environ.get(f"MEMSYNC_{name.upper()}")
        if env:
            values[name] = env
    values.update({k: v for k, v in flags.items() if v is not None})
    return Config(**{k: _coerce(k, v, kinds[k]) for k, v in values.items()})
