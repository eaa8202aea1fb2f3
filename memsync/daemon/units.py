"""The text of a service that runs `memsync watch` (or `serve`) at login: a systemd user unit or a
launchd agent's plist, made from one frozen description; pure (no file, no process)."""

from __future__ import annotations

import hashlib
import plistlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

# the first line of every unit memsync writes: how `service status` knows its own from the user's
MARK = "# written by memsync service install: memsync service uninstall VAULT removes it"
LABEL_PREFIX = "dev.memsync."  # a launchd agent's label, reverse-DNS as launchd expects
RESTART_SECONDS = 5  # a failed watcher is started again after this pause, not in a tight loop


@dataclass(frozen=True)
class Service:
    """One vault's service: what it runs (`argv`, the first item the running Python), for which
    vault, where its output goes, and what else its environment holds."""

    vault: Path  # real and absolute
    command: str  # watch or serve
    argv: tuple[str, ...]
    log: Path
    environment: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        """The systemd unit's name (without .service), one per vault: the folder's name and a
        hash of its real path, as the vault's index file is named."""
        return f"memsync-{slug(self.vault)}"

    @property
    def label(self) -> str:
        return LABEL_PREFIX + slug(self.vault)


def slug(vault: Path) -> str:
    """`My Notes` at /home/me -> `My-Notes-0123456789ab`: letters systemd and launchd accept."""
    text = str(vault)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", vault.name).strip("-.") or "vault"
    digest = hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:12]
    return f"{name[:40]}-{digest}"


def checked_path(path: Path, what: str) -> Path:
    """A path a unit can name: a unit file is lines of text, so no control character."""
    text = str(path)
    if any(ord(c) < 32 or ord(c) == 127 for c in text) or not path.is_absolute():
        raise ConfigError(f"the {what} {path!r} cannot be named in a service unit", usage=True)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"the {what} {path!r} is not UTF-8 text", usage=True) from None
    return path


_PLAIN = re.compile(r"[A-Za-z0-9_./:,@+=-]+")


def systemd_word(text: str, variables: bool = True) -> str:
    """One word of ExecStart= or Environment= as systemd reads it back: `%` doubled (a
    specifier), `$` too where `variables` are expanded (ExecStart's arguments, not its program nor
    Environment=), then double-quoted with `\\` and `"` escaped unless plain."""
    text = text.replace("%", "%%")
    if variables:
        text = text.replace("$", "$$")
    if _PLAIN.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def systemd_command(argv: tuple[str, ...]) -> str:
    """The value of ExecStart=: systemd refuses a program whose path holds a quote or a
    backslash, and expands no variable in it."""
    program, *arguments = argv
    if any(char in program for char in "\"'\\"):
        raise ConfigError(
            f"systemd cannot run a program whose path holds a quote or a backslash: {program}: "
            "install memsync (its Python) in a folder without them"
        )
    return " ".join([systemd_word(program, variables=False), *map(systemd_word, arguments)])


def systemd_unit(service: Service) -> str:
    """The user unit: started at login (default.target), again after a failure, its stdout and
    stderr appended to its log (systemd reads the path as written: only `%` is special)."""
    log = str(service.log).replace("%", "%%")
    environment = [("PYTHONUNBUFFERED", "1"), *service.environment]
    return "\n".join(
        [
            MARK,
            "[Unit]",
            f"Description=memsync {service.command} {str(service.vault).replace('%', '%%')}",
            "",
            "[Service]",
            "Type=simple",
            "ExecStart=" + systemd_command(service.argv),
            "Environment="
            + " ".join(systemd_word(f"{k}={v}", variables=False) for k, v in environment),
            "Restart=on-failure",
            f"RestartSec={RESTART_SECONDS}",
            f"StandardOutput=append:{log}",
            f"StandardError=append:{log}",
            "",
            "[Install]",
            "WantedBy=default.target",
            "",
        ]
    )


def launchd_plist(service: Service) -> bytes:
    """The agent's plist: started at load (login), again when it exits with a failure, its
    output appended to its log; its command an argument list, so nothing needs quoting."""
    return plistlib.dumps(
        {
            "Label": service.label,
            "ProgramArguments": list(service.argv),
            "EnvironmentVariables": {"PYTHONUNBUFFERED": "1", **dict(service.environment)},
            "RunAtLoad": True,
            "KeepAlive": {"SuccessfulExit": False},
            "ThrottleInterval": RESTART_SECONDS,
            "StandardOutPath": str(service.log),
            "StandardErrorPath": str(service.log),
            "ProcessType": "Background",
        }
    )
