"""The `memsync service` commands: describe the vault's service (units), then write it and tell the
user's service manager (manager), or print what would be done."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import click

from ..config import current, data_dir, make_private_folder
from ..daemon.manager import MANAGERS, Manager, ask, run_steps, shown, write_unit
from ..daemon.units import Service, checked_path, slug
from ..errors import MemsyncError, VaultError
from .common import BoundedGroup, echo

# where the service finds the config file and the indexes, as set in this shell: a service
# manager's environment has none of the shell's (the relay's socket follows MEMSYNC_HOME too)
LOCATING = ("MEMSYNC_HOME", "MEMSYNC_CONFIG", "XDG_CONFIG_HOME", "XDG_DATA_HOME")


def _manager(launchd: bool, systemd: bool) -> Manager:
    """The manager a flag names, else this system's own."""
    if launchd and systemd:
        raise click.UsageError("--launchd and --systemd name two managers: give one")
    name = "launchd" if launchd or (not systemd and sys.platform == "darwin") else "systemd"
    return MANAGERS[name](current().env)


def manager_options(command: Any) -> Any:
    for option in reversed(
        [
            click.option(
                "--launchd",
                is_flag=True,
                help="A launchd agent (macOS's), whatever this system is (default on macOS).",
            ),
            click.option(
                "--systemd",
                is_flag=True,
                help="A systemd user unit, whatever this system is (default on all but macOS).",
            ),
        ]
    ):
        command = option(command)
    return command


def _service(vault: Path, serve: bool, listen: str | None) -> Service:
    """VAULT's service as this memsync (its own Python, its data folder) would run it."""
    invocation = current()
    real = checked_path(Path(os.path.realpath(invocation.path(vault))), "vault")
    if not real.is_dir():
        raise VaultError(f"vault not found: {vault}")
    command = "serve" if serve else "watch"
    argv = [os.path.abspath(sys.executable), "-m", "memsync", command, str(real)]
    if listen is not None:
        argv += ["--listen", listen]
    log = checked_path(data_dir().absolute() / "logs" / f"{command}-{slug(real)}.log", "log")
    environment = tuple(
        (name, str(checked_path(invocation.path(invocation.env[name]).absolute(), name)))
        for name in LOCATING
        if invocation.env.get(name, "").strip()
    )
    return Service(real, command, tuple(argv), log, environment)


def _listen_checked(listen: str | None, serve: bool) -> None:
    if listen is None:
        return
    if not serve:
        raise click.UsageError("--listen is serve's: add --serve")
    from .serving import _listen

    _listen(listen)


@click.group(cls=BoundedGroup)
def service() -> None:
    """Run `memsync watch` (or `serve`) for a vault at login, as a systemd user unit or a
    launchd agent."""


@service.command("install")
@click.argument("vault", type=click.Path(path_type=Path))
@click.option("--serve", is_flag=True, help="Run `memsync serve VAULT` instead of `watch`.")
@click.option("--listen", help="serve's HOST:PORT (with --serve).")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print the unit and the commands; write and run nothing (with --launchd: the plist, on "
    "any system).",
)
@manager_options
def install(
    vault: Path, serve: bool, listen: str | None, dry_run: bool, launchd: bool, systemd: bool
) -> None:
    """Start `memsync watch VAULT` at login, and again if it fails, its log in memsync's data
    folder; enabled and started now. Installing it again changes nothing."""

    manager = _manager(launchd, systemd)
    _listen_checked(listen, serve)
    wanted = _service(vault, serve, listen)
    path, text = manager.file(wanted), manager.text(wanted)
    before = path.read_bytes() if path.exists() else None
    steps = [] if before == text else manager.start(wanted, fresh=before is None)
    if dry_run:
        _print_plan(text, f"write {path}" if before != text else f"keep {path}", steps)
        return
    _answering(manager, wanted)
    if before == text:
        if ask(manager.running(wanted)).ok:
            echo(f"memsync: already installed, unchanged: {path}", err=True)
            return
        steps = manager.start(wanted, fresh=True)
    else:
        write_unit(path, text)
        make_private_folder(wanted.log.parent)  # systemd appends to a file, makes no folder
    run_steps(steps)
    if serve:
        _token_note()
    echo(f"installed {path}: memsync {wanted.command} {wanted.vault} at login; log {wanted.log}")


@service.command("uninstall")
@click.argument("vault", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the commands; stop and remove nothing.")
@manager_options
def uninstall(vault: Path, dry_run: bool, launchd: bool, systemd: bool) -> None:
    """Stop VAULT's service and remove the file `service install` wrote (the log stays)."""

    manager = _manager(launchd, systemd)
    real = Path(os.path.realpath(current().path(vault)))
    installed = [s for s in manager.installed() if s["vault"] == str(real)]
    if not installed:
        raise MemsyncError(f"no memsync service for {vault} (memsync service status lists them)")
    # the file names the service: the same whatever command or flags it was installed with
    wanted = Service(real, installed[0]["command"], (), Path(installed[0]["log"]))
    path = Path(installed[0]["file"])
    steps = manager.stop(wanted)
    if dry_run:
        _print_plan(b"", f"remove {path}", [*steps, *manager.after_removal()])
        return
    _answering(manager, wanted)
    run_steps(steps)
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    run_steps(manager.after_removal())
    echo(f"uninstalled {path} (its log stays: {wanted.log})")


@service.command("status")
@click.option("--json", "as_json", is_flag=True, help="Print as JSON.")
@manager_options
def status(as_json: bool, launchd: bool, systemd: bool) -> None:
    """The vaults' services memsync installed, and what the manager says of each."""

    from .. import output

    manager = _manager(launchd, systemd)
    answer = ask(manager.answers())
    services = manager.installed()
    for found in services:
        found["state"] = manager.state(found["name"]) if answer.ok else None
    facts = {
        "manager": manager.name,
        "answers": answer.ok,
        **({} if answer.ok else {"why": answer.why}),
        "services": services,
    }
    echo(output.as_json(facts) if as_json else _status_text(facts))


def _status_text(facts: dict[str, Any]) -> str:
    lines = [] if facts["answers"] else [f"{facts['manager']} does not answer: {facts['why']}"]
    if not facts["services"]:
        lines.append("no memsync service installed (memsync service install VAULT)")
    for found in facts["services"]:
        state = found["state"] or "unknown"
        lines.append(f"{found['name']}: memsync {found['command']} {found['vault']}: {state}")
        lines.append(f"  file {found['file']}")
        lines.append(f"  log {found['log']}")
    return "\n".join(lines)


def _print_plan(text: bytes, write: str, steps: list[tuple[str, ...]]) -> None:
    """A dry run: the unit's text on stdout as it would be written, what would be done on
    stderr."""
    if text:
        current().stdout.write(text.decode("utf-8"))
    echo(f"memsync: dry run: would {write}", err=True)
    for step in steps:
        echo(f"memsync: dry run: then {shown(step)}", err=True)


def _answering(manager: Manager, wanted: Service) -> None:
    """Nothing is written unless the manager answers; otherwise the first line says so, then
    what to run instead, and exit 1."""
    answer = ask(manager.answers())
    if answer.ok:
        return
    echo(
        f"memsync: error: no user service manager answers here ({manager.probe}: {answer.why}); "
        "nothing was installed or removed",
        err=True,
    )
    if wanted.argv:
        echo("memsync: run it yourself instead, in the background:", err=True)
        folder, log = shown([str(wanted.log.parent)]), shown([str(wanted.log)])
        echo(f"  mkdir -p {folder} && nohup {shown(wanted.argv)} >> {log} 2>&1 &", err=True)
    wsl = " (WSL: [boot] systemd=true in /etc/wsl.conf, then wsl --shutdown)"
    echo(
        f"memsync: or run this command again where {manager.name} runs for your user"
        + (wsl if manager.name == "systemd" else ""),
        err=True,
    )
    sys.exit(1)


def _token_note() -> None:
    """A service has no terminal, so serve never prints a token there: one must exist."""
    from .serving import _tokens

    if not _tokens().all():
        echo(
            "memsync: note: memsync serve admits token holders only and none exists yet: make "
            "one with memsync token add NAME",
            err=True,
        )
