"""The Claude Code plugin (integrations/claude-code) and its marketplace (.claude-plugin/), as a
user installs them: Claude Code itself validates both, adds the marketplace, installs the plugin
for a vault named once, and finds memsync's server connected; writes only when turned on."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.agent_clients import client
from tests.conftest import ROOT, SAMPLE_VAULT, VaultIndexer

PLUGIN = ROOT / "integrations" / "claude-code"
MARKETPLACE = ROOT / ".claude-plugin" / "marketplace.json"
# the memsync that pip installed beside this Python: what a user's PATH finds
MEMSYNC = Path(sys.executable).parent / "memsync"


def claude(*args: str, env: dict[str, str], stdin: str | None = None) -> str:
    """`claude ARGS` in the throwaway HOME that `env` names; its output, having exited 0."""
    done = subprocess.run(
        [str(client("claude")), *args],
        capture_output=True,
        text=True,
        env=env,
        input=stdin,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def test_claude_code_validates_the_plugin_and_the_marketplace() -> None:
    env = os.environ | {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1"}
    for path in (PLUGIN, ROOT):
        assert "Validation passed" in claude("plugin", "validate", "--strict", str(path), env=env)


def test_the_marketplace_offers_the_plugin_at_memsync_s_version() -> None:
    import memsync

    offered = json.loads(MARKETPLACE.read_text())
    (entry,) = offered["plugins"]
    assert (ROOT / entry["source"]).resolve() == PLUGIN
    plugin = json.loads((PLUGIN / ".claude-plugin" / "plugin.json").read_text())
    assert plugin["name"] == entry["name"] == "memsync"
    assert plugin["version"] == memsync.__version__
    # the vault is asked for once, as a folder; writes are off until the user turns them on
    vault = plugin["userConfig"]["vault"]
    assert (vault["type"], vault["required"]) == ("directory", True)
    assert plugin["userConfig"]["writable"]["default"] is False


def recording_memsync(folder: Path, log: Path) -> Path:
    """A folder whose `memsync` notes how Claude Code started it, then runs the real one."""
    folder.mkdir()
    shim = folder / "memsync"
    shim.write_text(
        "#!/bin/sh\n"
        f'printf "%s|%s\\n" "$MEMSYNC_WRITABLE" "$*" >> "{log}"\n'
        f'exec "{MEMSYNC}" "$@"\n'
    )  # fmt: skip
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    return folder


def test_claude_code_installs_the_plugin_from_the_marketplace_and_connects(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    vault = tmp_path / "notes"
    shutil.copytree(SAMPLE_VAULT, vault)
    indexed_vault(vault, host=socket.gethostname())  # where Claude Code starts memsync
    log = tmp_path / "started.log"
    bin_folder = recording_memsync(tmp_path / "bin", log)
    home = tmp_path / "home"
    home.mkdir()
    env = os.environ | {
        "HOME": str(home),
        "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    claude("plugin", "marketplace", "add", str(ROOT), env=env)
    claude("plugin", "install", "memsync@memsync", "--config", f"vault={vault}", env=env)

    listed = claude("mcp", "list", env=env)
    (line,) = [line for line in listed.splitlines() if line.startswith("plugin:memsync:memsync")]
    assert f"memsync mcp --vault {vault}" in line and "Connected" in line, listed
    assert log.read_text().splitlines()[-1] == f"false|mcp --vault {vault}"

    # the user opts in to writes: the next start offers them
    claude(
        "plugin", "configure", "memsync@memsync", "--values-stdin",
        env=env, stdin=json.dumps({"writable": "true"}),
    )  # fmt: skip
    assert "Connected" in claude("mcp", "list", env=env)
    assert log.read_text().splitlines()[-1] == f"true|mcp --vault {vault}"


def tool_names(vault: Path, env: dict[str, str]) -> list[str]:
    """The tools `memsync mcp --vault VAULT` lists to the SDK's client, in the environment the
    plugin gives it."""

    async def run() -> list[str]:
        params = StdioServerParameters(
            command=str(MEMSYNC), args=["mcp", "--vault", str(vault)], env=env
        )
        with open(os.devnull, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                return [tool.name for tool in (await session.list_tools()).tools]

    return anyio.run(run)


def test_memsync_writable_turns_writes_on_as_the_flag_does(indexed_vault: VaultIndexer) -> None:
    vault = indexed_vault(host=socket.gethostname())  # a server may write only on its machine
    env: dict[str, Any] = {
        k: v for k, v in os.environ.items() if k.startswith(("MEMSYNC_", "HOME"))
    }
    read_only = tool_names(vault, env | {"MEMSYNC_WRITABLE": "false"})
    assert "memory_write" not in read_only and "memory_search" in read_only
    assert tool_names(vault, env | {"MEMSYNC_WRITABLE": "true"}) == [*read_only, "memory_write"]
