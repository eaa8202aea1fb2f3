"""Build memsync.mcpb, the Claude Desktop bundle: `python scripts/build_mcpb.py [OUT]`.

The bundle is a zip of integrations/claude-desktop/manifest.json (server type `uv`), memsync's
pyproject.toml and README.md, and its source: the host's uv installs the dependencies from the
package index on the first start, so the bundle carries no compiled file and runs on any platform.
"""

from __future__ import annotations

import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "integrations" / "claude-desktop" / "manifest.json"
DEFAULT_OUT = ROOT / "dist" / "memsync.mcpb"


def bundled_files(root: Path = ROOT) -> Iterator[tuple[Path, str]]:
    """(file, its name in the bundle): the manifest, what uv needs to build memsync, and what
    the wheel holds: the package's modules and its package data (pyproject.toml's), nothing
    else a working folder may hold (an index, an editor's backup)."""
    yield root / MANIFEST.relative_to(ROOT), "manifest.json"
    yield root / "pyproject.toml", "pyproject.toml"
    yield root / "README.md", "README.md"  # pyproject.toml's readme: the build reads it
    package = root / "memsync"
    shipped = [*package.rglob("*.py"), *(package / "web" / "assets").glob("*")]
    for path in sorted(shipped):
        if path.is_file() and "__pycache__" not in path.parts:
            yield path, path.relative_to(root).as_posix()


def build(out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as bundle:
        for path, name in bundled_files():
            bundle.write(path, name)
    partial.replace(out)  # never a half-written bundle under the final name
    return out


if __name__ == "__main__":
    built = build(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_OUT)
    print(f"built {built} ({built.stat().st_size // 1024} KB)")
