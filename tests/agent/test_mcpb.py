"""memsync.mcpb, the Claude Desktop bundle that `python scripts/build_mcpb.py` builds: mcpb itself
validates its manifest, packs it and reads it; unpacked, the command its mcp_config gives (as
mcpb's own code fills it in for the host) starts memsync's server through uv, which answers
tools/list and a search."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

import memsync
from tests.agent_clients import client, node_path
from tests.conftest import ROOT, VaultIndexer

MANIFEST = ROOT / "integrations" / "claude-desktop" / "manifest.json"
BUILD = ROOT / "scripts" / "build_mcpb.py"


def mcpb(*args: str) -> str:
    """`mcpb ARGS` (on the Node that .ci/node.sh chooses); its output, having exited 0."""
    done = subprocess.run(
        [str(client("mcpb")), *args],
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": node_path()},
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def built(folder: Path) -> Path:
    """The bundle, built by the one command the docs give."""
    out = folder / "memsync.mcpb"
    done = subprocess.run(
        [sys.executable, str(BUILD), str(out)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return out


def test_mcpb_validates_the_manifest() -> None:
    assert "validation passes" in mcpb("validate", str(MANIFEST))


def test_the_manifest_runs_memsync_through_uv_for_a_folder_the_user_picks() -> None:
    from memsync.agent.server import MemoryServer, build
    from memsync.config import Config

    manifest = json.loads(MANIFEST.read_text())
    assert (manifest["manifest_version"], manifest["version"]) == ("0.4", memsync.__version__)
    assert manifest["server"]["type"] == "uv" and manifest["server"]["mcp_config"]["command"]
    assert sorted(manifest["compatibility"]["platforms"]) == ["darwin", "linux", "win32"]
    vault, writable = manifest["user_config"]["vault"], manifest["user_config"]["writable"]
    assert (vault["type"], vault["required"]) == ("directory", True)
    assert (writable["type"], writable["default"]) == ("boolean", False)
    # the tools Claude Desktop shows before the install: those a writable server lists
    server = MemoryServer(Config(), lambda: None, True, ())  # type: ignore[arg-type, return-value]
    listed = anyio.run(build(server).list_tools)
    assert [tool["name"] for tool in manifest["tools"]] == [tool.name for tool in listed]


def test_the_bundle_holds_the_source_and_pyproject_and_nothing_compiled(tmp_path: Path) -> None:
    bundle = built(tmp_path)
    assert "memsync.mcpb" in mcpb("info", str(bundle))
    names = set(zipfile.ZipFile(bundle).namelist())
    in_checkout = {p.relative_to(ROOT).as_posix() for p in (ROOT / "memsync").rglob("*.py")}
    assert {"manifest.json", "pyproject.toml", "README.md"} | in_checkout <= names
    assert not [n for n in names if n.endswith((".pyc", ".pyo", ".so", ".pyd", ".dll"))]
    # what mcpb unpacks, mcpb packs again
    unpacked = tmp_path / "unpacked"
    mcpb("unpack", str(bundle), str(unpacked))
    mcpb("pack", str(unpacked), str(tmp_path / "again.mcpb"))
    assert "again.mcpb" in mcpb("info", str(tmp_path / "again.mcpb"))


def host_config(unpacked: Path, user_config: dict[str, Any]) -> dict[str, Any]:
    """The server's command as mcpb's own code (which the host uses) fills the manifest in."""
    script = (
        "import { getMcpConfigForManifest } from '@anthropic-ai/mcpb';\n"
        "import { readFileSync } from 'fs';\n"
        "const [dir, values] = process.argv.slice(1);\n"
        "const manifest = JSON.parse(readFileSync(dir + '/manifest.json', 'utf8'));\n"
        "const config = await getMcpConfigForManifest({ manifest, extensionPath: dir,\n"
        "  systemDirs: {}, userConfig: JSON.parse(values), pathSeparator: '/' });\n"
        "console.log(JSON.stringify(config));\n"
    )
    client("mcpb")
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script, str(unpacked), json.dumps(user_config)],
        cwd=ROOT / "clients",
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": node_path()},
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


def search_through(
    config: dict[str, Any], env: dict[str, str], log: Path
) -> tuple[list[str], list[str]]:
    """(tools listed, paths found for the SSH port) from the server `config` starts; its stderr
    (uv's and memsync's) in `log`."""

    async def run() -> tuple[list[str], list[str]]:
        params = StdioServerParameters(
            command=config["command"], args=config["args"], env=env | config["env"]
        )
        # the first start installs memsync's dependencies from the package index
        with anyio.fail_after(600), open(log, "w") as errlog:
            async with (
                stdio_client(params, errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                tools = [tool.name for tool in (await session.list_tools()).tools]
                found = await session.call_tool("memory_search", {"query": "ssh port 2222"})
                assert not found.is_error, found.content
                assert found.structured_content is not None
                paths = [hit["path"] for hit in found.structured_content["results"]]
                return tools, paths

    return anyio.run(run)


def test_the_unpacked_bundle_starts_memsync_with_uv_and_answers_a_search(
    tmp_path: Path, indexed_vault: VaultIndexer
) -> None:
    vault = indexed_vault()
    unpacked = tmp_path / "unpacked"
    mcpb("unpack", str(built(tmp_path)), str(unpacked))
    config = host_config(unpacked, {"vault": str(vault)})
    assert (config["command"], config["env"]) == ("uv", {"MEMSYNC_WRITABLE": "false"})
    opted_in = host_config(unpacked, {"vault": str(vault), "writable": True})
    assert opted_in["env"] == {"MEMSYNC_WRITABLE": "true"}

    uv = shutil.which("uv", path=str(Path(sys.executable).parent))
    assert uv is not None, "uv comes with the test extra: pip install -e '.[test]'"
    # the user's environment (where the package index's certificates may be set), with uv found
    # as a host finds its own, and no Python fetched but the package index's packages
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {
        "PATH": f"{Path(uv).parent}{os.pathsep}{os.environ['PATH']}",
        "UV_CACHE_DIR": os.environ.get("UV_CACHE_DIR", str(tmp_path / "uv-cache")),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    log = tmp_path / "server.log"
    try:
        tools, paths = search_through(config, env, log)
    except Exception as exc:
        raise AssertionError(log.read_text()) from exc
    assert "memory_search" in tools and "memory_write" not in tools
    assert "tech/ssh.md" in paths


def test_the_bundle_holds_what_the_wheel_holds_not_whatever_lies_in_the_package_folder(
    tmp_path: Path,
) -> None:
    import runpy

    bundled_files = runpy.run_path(str(BUILD))["bundled_files"]
    for name in ("memsync/__init__.py", "memsync/web/assets/page.css", "memsync/notes.sqlite"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "memsync" / "page.py~").write_text("")  # an editor's backup
    names = [name for _, name in bundled_files(tmp_path)]
    assert names == [
        "manifest.json",
        "pyproject.toml",
        "README.md",
        "memsync/__init__.py",
        "memsync/web/assets/page.css",
    ]
