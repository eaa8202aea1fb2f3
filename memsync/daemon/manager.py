"""The user's service manager, asked and told through its own command (`systemctl --user`,
`launchctl`): where a unit's file goes, the steps that enable, start, stop and remove it, and
whether one answers at all. The files and processes of `memsync service` happen here."""

from __future__ import annotations

import os
import plistlib
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from ..config import current, make_private_folder
from ..errors import MemsyncError, os_reason
from .units import LABEL_PREFIX, MARK, Service, launchd_plist, systemd_unit

Command = tuple[str, ...]
ASK_TIMEOUT = 30  # seconds: a manager that does not answer a question in this time is not there


@dataclass(frozen=True)
class Answer:
    code: int
    out: str
    err: str

    @property
    def ok(self) -> bool:
        return self.code == 0

    @property
    def why(self) -> str:
        """The first line the command printed about its failure."""
        lines = (self.err or self.out).strip().splitlines()
        return lines[0] if lines else f"exit code {self.code}"


def ask(command: Sequence[str]) -> Answer:
    """Run a manager's command with this command's environment (a stand-in on PATH answers for
    it in tests); a missing program answers 127, as a shell says it."""
    environment = current().env
    found = shutil.which(command[0], path=environment.get("PATH"))
    if found is None:
        return Answer(127, "", f"{command[0]}: command not found")
    try:
        done = subprocess.run(
            [found, *command[1:]],
            capture_output=True,
            text=True,
            env=dict(environment),
            timeout=ASK_TIMEOUT,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        return Answer(124, "", f"{command[0]} did not answer in {ASK_TIMEOUT} s")
    except OSError as exc:
        return Answer(126, "", f"{command[0]}: {os_reason(exc)}")
    return Answer(done.returncode, done.stdout, done.stderr)


class Manager:
    """What both managers share; each says where its files go and which commands do what."""

    name: ClassVar[str]
    probe: ClassVar[str]  # the question that tells whether it answers, as the user may type it

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env

    def folder(self) -> Path:
        raise NotImplementedError

    def file(self, service: Service) -> Path:
        raise NotImplementedError

    def text(self, service: Service) -> bytes:
        raise NotImplementedError

    def answers(self) -> Command:
        raise NotImplementedError

    def running(self, service: Service) -> Command:
        """A question whose exit code 0 means the service is enabled (or loaded)."""
        raise NotImplementedError

    def start(self, service: Service, fresh: bool) -> list[Command]:
        """The steps after its file is written: `fresh`, no earlier version of it was loaded."""
        raise NotImplementedError

    def stop(self, service: Service) -> list[Command]:
        """The steps before its file is removed."""
        raise NotImplementedError

    def after_removal(self) -> list[Command]:
        return []

    def installed(self) -> list[dict[str, Any]]:
        """The services memsync wrote here: name, file, vault, command, log."""
        raise NotImplementedError

    def state(self, name: str) -> str:
        """What the manager says of the service `name` now, in a few words."""
        raise NotImplementedError


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or os.path.expanduser("~"))


class Systemd(Manager):
    name = "systemd"
    probe = "systemctl --user"

    def folder(self) -> Path:
        base = self.env.get("XDG_CONFIG_HOME", "").strip()
        return (Path(base) if base else _home(self.env) / ".config") / "systemd" / "user"

    def file(self, service: Service) -> Path:
        return self.folder() / f"{service.name}.service"

    def text(self, service: Service) -> bytes:
        return systemd_unit(service).encode("utf-8")

    def answers(self) -> Command:
        return ("systemctl", "--user", "show-environment")

    def running(self, service: Service) -> Command:
        return ("systemctl", "--user", "is-enabled", "--quiet", f"{service.name}.service")

    def start(self, service: Service, fresh: bool) -> list[Command]:
        unit = f"{service.name}.service"
        reload = ("systemctl", "--user", "daemon-reload")
        if fresh:
            return [reload, ("systemctl", "--user", "enable", "--now", unit)]
        return [
            reload,
            ("systemctl", "--user", "enable", unit),
            ("systemctl", "--user", "restart", unit),
        ]

    def stop(self, service: Service) -> list[Command]:
        return [("systemctl", "--user", "disable", "--now", f"{service.name}.service")]

    def after_removal(self) -> list[Command]:
        return [("systemctl", "--user", "daemon-reload")]

    def state(self, name: str) -> str:
        unit = f"{name}.service"
        active = ask(("systemctl", "--user", "is-active", unit)).out.strip() or "unknown"
        enabled = ask(("systemctl", "--user", "is-enabled", unit)).out.strip() or "unknown"
        return f"{active} ({enabled})"

    def installed(self) -> list[dict[str, Any]]:
        found = []
        folder = self.folder()
        for path in sorted(folder.glob("memsync-*.service")) if folder.is_dir() else []:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            if not lines or lines[0] != MARK:
                continue  # a unit the user wrote: not memsync's to list or remove
            fields = dict(line.split("=", 1) for line in lines if "=" in line)
            _, command, vault = fields.get("Description", "memsync ? ?").split(" ", 2)
            log = fields.get("StandardOutput", "").removeprefix("append:")
            found.append(
                {
                    "name": path.stem,
                    "file": str(path),
                    "command": command,
                    "vault": vault.replace("%%", "%"),
                    "log": log.replace("%%", "%"),
                }
            )
        return found


class Launchd(Manager):
    name = "launchd"
    probe = "launchctl"

    def folder(self) -> Path:
        return _home(self.env) / "Library" / "LaunchAgents"

    def file(self, service: Service) -> Path:
        return self.folder() / f"{service.label}.plist"

    def text(self, service: Service) -> bytes:
        return launchd_plist(service)

    def domain(self) -> str:
        return f"gui/{os.getuid()}"

    def answers(self) -> Command:
        return ("launchctl", "print", self.domain())

    def running(self, service: Service) -> Command:
        return ("launchctl", "print", f"{self.domain()}/{service.label}")

    def start(self, service: Service, fresh: bool) -> list[Command]:
        load = ("launchctl", "bootstrap", self.domain(), str(self.file(service)))
        return [load] if fresh else [*self.stop(service), load]

    def stop(self, service: Service) -> list[Command]:
        return [("launchctl", "bootout", f"{self.domain()}/{service.label}")]

    def state(self, name: str) -> str:
        answer = ask(("launchctl", "print", f"{self.domain()}/{name}"))
        if not answer.ok:
            return "not loaded"
        states = [
            line.split("=", 1)[1].strip() for line in answer.out.splitlines() if "state =" in line
        ]
        return f"{states[0] if states else 'loaded'} (loaded)"

    def installed(self) -> list[dict[str, Any]]:
        found = []
        folder = self.folder()
        for path in sorted(folder.glob(f"{LABEL_PREFIX}*.plist")) if folder.is_dir() else []:
            try:
                agent = plistlib.loads(path.read_bytes())
                argv = agent["ProgramArguments"]
                at = argv.index("memsync")
                command, vault = argv[at + 1], argv[at + 2]
            except (OSError, ValueError, KeyError, IndexError, plistlib.InvalidFileException):
                continue
            found.append(
                {
                    "name": agent["Label"],
                    "file": str(path),
                    "command": command,
                    "vault": vault,
                    "log": agent.get("StandardOutPath", ""),
                }
            )
        return found


MANAGERS = {"systemd": Systemd, "launchd": Launchd}


def shown(command: Sequence[str]) -> str:
    """A command as a user would type it."""
    import shlex

    return shlex.join(command)


def run_steps(steps: Sequence[Command]) -> None:
    """Each step in turn; the first that fails stops the rest, saying what it printed."""
    for step in steps:
        answer = ask(step)
        if not answer.ok:
            raise MemsyncError(f"{shown(step)} failed: {answer.why}")


def write_unit(path: Path, text: bytes) -> None:
    """The unit's file, whole or not at all (a manager reading it half written would refuse it)."""
    make_private_folder(path.parent)
    partial = path.with_name(f".{path.name}.tmp")
    try:
        partial.write_bytes(text)
        os.replace(partial, path)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise MemsyncError(f"cannot write {path}: {os_reason(exc)}") from exc
