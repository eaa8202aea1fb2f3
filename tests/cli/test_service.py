"""`memsync service`: the unit's text (systemd-analyze verify reads it, plistlib the plist), and
install, uninstall and status against a stand-in for `systemctl --user` or `launchctl` on PATH
that records what it is asked."""

from __future__ import annotations

import json
import os
import plistlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from memsync.daemon.units import Service, launchd_plist, systemd_unit, systemd_word
from memsync.errors import ConfigError
from tests.conftest import cli

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


def verify(unit: Path) -> None:
    """systemd's own reading of a unit: no error, no warning (a warning still exits 0)."""
    if SYSTEMD_ANALYZE is None:
        if os.environ.get("CI"):
            pytest.fail("no systemd-analyze in CI: .ci/run installs Debian's systemd")
        pytest.skip("no systemd-analyze: apt-get install systemd (as .ci/run does)")
    done = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and not done.stderr.strip(), done.stderr


def stand_in(folder: Path, program: str, answer: int = 0, says: str = "") -> Path:
    """A `program` on PATH that appends its arguments to calls.jsonl and exits `answer`; `says`
    on stderr (or, answering 0, on stdout)."""
    folder.mkdir(parents=True, exist_ok=True)
    calls = folder / "calls.jsonl"
    script = folder / program
    script.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"with open({str(calls)!r}, 'a') as f:\n    f.write(json.dumps(sys.argv[1:]) + '\\n')\n"
        f"print({says!r}, file=sys.stdout if {answer} == 0 else sys.stderr)\n"
        f"sys.exit({answer})\n"
    )
    script.chmod(0o755)
    return calls


def recorded(calls: Path) -> list[list[str]]:
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text().splitlines()]


@pytest.fixture
def on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH for the stand-ins."""
    folder = tmp_path / "bin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    return folder


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    folder = tmp_path / "My Notes 100% $HOME"
    folder.mkdir()
    return folder


def test_a_word_systemd_would_split_or_expand_is_quoted_and_escaped() -> None:
    assert systemd_word("/usr/bin/python3") == "/usr/bin/python3"
    assert systemd_word("/a b/c") == '"/a b/c"'
    assert systemd_word('say "hi"\\') == '"say \\"hi\\"\\\\"'
    assert systemd_word("100%") == '"100%%"'
    assert systemd_word("$HOME") == '"$$HOME"'
    assert systemd_word(";") == '";"'
    assert systemd_word("") == '""'
    assert systemd_word("A=$x 1%", variables=False) == '"A=$x 1%%"'


def test_a_program_systemd_cannot_run_is_refused_in_one_line(tmp_path: Path) -> None:
    argv = (str(tmp_path / 'it"s' / "python3"), "-m", "memsync", "watch", str(tmp_path))
    with pytest.raises(ConfigError, match="quote or a backslash"):
        systemd_unit(Service(tmp_path, "watch", argv, tmp_path / "log"))


def test_the_unit_passes_systemd_analyze_verify_with_spaces_quotes_and_percents(
    tmp_path: Path,
) -> None:
    """verify finds the executable only where systemd reads its quoted path back as it is."""
    python = tmp_path / "my py 50% $x; 笔记" / "python3"
    python.parent.mkdir()
    python.symlink_to(sys.executable)
    vault = tmp_path / 'notes "a" 50% $x; 笔记 \\'
    log = tmp_path / "logs 100%" / "watch.log"
    service = Service(vault, "watch", (str(python), "-m", "memsync", "watch", str(vault)), log)
    unit = tmp_path / f"{service.name}.service"
    unit.write_text(systemd_unit(service))
    verify(unit)
    text = unit.read_text()
    assert f"StandardOutput=append:{tmp_path}/logs 100%%/watch.log" in text
    assert "Restart=on-failure" in text and "WantedBy=default.target" in text


def test_the_plist_parses_and_its_arguments_are_the_command_word_for_word(tmp_path: Path) -> None:
    vault = tmp_path / 'notes "a" 50% $x'
    argv = (sys.executable, "-m", "memsync", "serve", str(vault), "--listen", "127.0.0.1:9")
    service = Service(vault, "serve", argv, tmp_path / "serve.log", (("MEMSYNC_HOME", "/m h"),))
    agent = plistlib.loads(launchd_plist(service))
    assert agent["ProgramArguments"] == list(argv)
    assert agent["Label"] == service.label and agent["RunAtLoad"] is True
    assert agent["KeepAlive"] == {"SuccessfulExit": False}
    assert agent["StandardOutPath"] == agent["StandardErrorPath"] == str(tmp_path / "serve.log")
    assert agent["EnvironmentVariables"]["MEMSYNC_HOME"] == "/m h"


def unit_folder() -> Path:
    return Path(os.environ["XDG_CONFIG_HOME"]) / "systemd" / "user"


def test_install_writes_a_unit_that_runs_this_memsync_enables_and_starts_it(
    on_path: Path, vault: Path
) -> None:
    calls = stand_in(on_path, "systemctl")
    done = cli("service", "install", str(vault))
    assert done.returncode == 0, done.stderr
    [unit] = unit_folder().iterdir()
    text = unit.read_text()
    assert systemd_word(os.path.abspath(sys.executable)) in text
    assert f"-m memsync watch {systemd_word(str(vault))}" in text
    log = Path(os.environ["MEMSYNC_HOME"]) / "logs"
    assert f"StandardError=append:{log}/watch-" in text
    assert log.is_dir()  # systemd appends to the file, but makes no folder
    for name in ("MEMSYNC_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):  # as this shell has them
        assert f" {name}={os.environ[name]}" in text
    assert recorded(calls) == [
        ["--user", "show-environment"],
        ["--user", "daemon-reload"],
        ["--user", "enable", "--now", unit.name],
    ]
    verify(unit)


def test_installing_twice_changes_nothing_and_enables_nothing_again(
    on_path: Path, vault: Path
) -> None:
    calls = stand_in(on_path, "systemctl")
    assert cli("service", "install", str(vault)).returncode == 0
    [unit] = unit_folder().iterdir()
    before = (unit.read_bytes(), unit.stat().st_mtime_ns)
    calls.unlink()
    again = cli("service", "install", str(vault))
    assert again.returncode == 0, again.stderr
    assert "unchanged" in again.stderr
    assert (unit.read_bytes(), unit.stat().st_mtime_ns) == before
    assert recorded(calls) == [
        ["--user", "show-environment"],
        ["--user", "is-enabled", "--quiet", unit.name],
    ]


def test_installing_serve_over_watch_rewrites_the_unit_and_restarts_it(
    on_path: Path, vault: Path
) -> None:
    calls = stand_in(on_path, "systemctl")
    assert cli("service", "install", str(vault)).returncode == 0
    calls.unlink()
    done = cli("service", "install", str(vault), "--serve", "--listen", "127.0.0.1:8765")
    assert done.returncode == 0, done.stderr
    [unit] = unit_folder().iterdir()
    assert "-m memsync serve" in unit.read_text() and "--listen 127.0.0.1:8765" in unit.read_text()
    assert [call[1] for call in recorded(calls)] == [
        "show-environment",
        "daemon-reload",
        "enable",
        "restart",
    ]
    assert "memsync token add NAME" in done.stderr  # a service has no terminal to show a token


def test_uninstall_stops_it_and_removes_exactly_what_install_wrote(
    on_path: Path, vault: Path
) -> None:
    calls = stand_in(on_path, "systemctl")
    unit_folder().mkdir(parents=True)
    mine = unit_folder() / "memsync-mine.service"  # the user's own: never touched
    mine.write_text("[Service]\nExecStart=/bin/true\n")
    assert cli("service", "install", str(vault)).returncode == 0
    [unit] = [p for p in unit_folder().iterdir() if p != mine]
    calls.unlink()
    done = cli("service", "uninstall", str(vault))
    assert done.returncode == 0, done.stderr
    assert list(unit_folder().iterdir()) == [mine]
    assert recorded(calls) == [
        ["--user", "show-environment"],
        ["--user", "disable", "--now", unit.name],
        ["--user", "daemon-reload"],
    ]
    assert cli("service", "uninstall", str(vault)).returncode == 1


def test_status_lists_memsyncs_services_with_what_the_manager_says(
    on_path: Path, vault: Path
) -> None:
    stand_in(on_path, "systemctl", says="active")
    assert cli("service", "install", str(vault)).returncode == 0
    done = cli("service", "status", "--json")
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    [found] = facts["services"]
    assert facts["manager"] == "systemd" and facts["answers"] is True
    assert found["vault"] == str(vault) and found["command"] == "watch"
    assert found["state"] == "active (active)"
    assert found["log"].startswith(os.environ["MEMSYNC_HOME"])
    assert str(vault) in cli("service", "status").stdout


def test_where_no_manager_answers_it_says_so_first_and_what_to_run_instead(
    on_path: Path, vault: Path
) -> None:
    stand_in(on_path, "systemctl", answer=1, says="Failed to connect to bus: No medium found")
    done = cli("service", "install", str(vault))
    assert done.returncode == 1
    first, *rest = done.stderr.splitlines()
    assert first.startswith("memsync: error: no user service manager answers here")
    assert "Failed to connect to bus" in first
    assert any("nohup" in line and "memsync watch" in line for line in rest)
    assert not unit_folder().exists()


def test_a_dry_run_prints_the_unit_and_the_commands_whether_or_not_a_manager_answers(
    on_path: Path, vault: Path
) -> None:
    calls = stand_in(on_path, "systemctl", answer=1, says="Failed to connect to bus")
    done = cli("service", "install", str(vault), "--dry-run")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# written by memsync service install")
    assert "then systemctl --user enable --now memsync-" in done.stderr
    assert recorded(calls) == [] and not unit_folder().exists()


def test_launchd_prints_its_plist_anywhere_and_is_bootstrapped_where_it_answers(
    on_path: Path, vault: Path
) -> None:
    dry = cli("service", "install", str(vault), "--launchd", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert plistlib.loads(dry.stdout.encode())["ProgramArguments"][3:5] == ["watch", str(vault)]
    calls = stand_in(on_path, "launchctl")
    assert cli("service", "install", str(vault), "--launchd").returncode == 0
    agents = Path(os.environ["HOME"]) / "Library" / "LaunchAgents"
    [plist] = agents.iterdir()
    assert plistlib.loads(plist.read_bytes())["Label"] == plist.stem
    domain = f"gui/{os.getuid()}"
    assert recorded(calls) == [["print", domain], ["bootstrap", domain, str(plist)]]
    calls.unlink()
    assert cli("service", "uninstall", str(vault), "--launchd").returncode == 0
    assert recorded(calls) == [["print", domain], ["bootout", f"{domain}/{plist.stem}"]]
    assert list(agents.iterdir()) == []


def test_listen_without_serve_and_a_missing_vault_are_refused(on_path: Path, vault: Path) -> None:
    stand_in(on_path, "systemctl")
    assert cli("service", "install", str(vault), "--listen", "127.0.0.1:8765").returncode == 2
    missing = cli("service", "install", str(vault / "nothing"))
    assert missing.returncode == 1 and "vault not found" in missing.stderr
    assert not unit_folder().exists()


def test_without_a_manager_uninstall_removes_nothing_and_status_says_why(
    on_path: Path, vault: Path
) -> None:
    stand_in(on_path, "systemctl")
    assert cli("service", "install", str(vault)).returncode == 0
    [unit] = unit_folder().iterdir()
    stand_in(on_path, "systemctl", answer=1, says="Failed to connect to bus: No medium found")
    done = cli("service", "uninstall", str(vault))
    assert done.returncode == 1 and unit.exists()
    assert done.stderr.startswith("memsync: error: no user service manager answers here")
    status = cli("service", "status")
    assert status.returncode == 0
    assert status.stdout.startswith("systemd does not answer: Failed to connect to bus")
    assert f"{unit.stem}: memsync watch {vault}: unknown" in status.stdout
