"""The agents' real clients that clients/package.json pins (Claude Code, mcpb), as the tests run
them: installed by `npm ci --prefix clients`; in CI a missing one fails the test, elsewhere it
is skipped saying why."""

from __future__ import annotations

import functools
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = ROOT / "clients" / "node_modules" / ".bin"


def client(name: str) -> Path:
    """The client's command, or the test ends here (failed in CI, skipped elsewhere)."""
    command = BIN / name
    if not command.exists():
        reason = f"{name} is not installed: run `npm ci --prefix clients` (.ci/run does)"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return command


@functools.cache
def node_path() -> str:
    """PATH with Node 22.19 or newer first, as .ci/node.sh sets it (mcpb runs on Node)."""
    done = subprocess.run(
        ["bash", "-c", '. .ci/node.sh && printf %s "$PATH"'],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout
