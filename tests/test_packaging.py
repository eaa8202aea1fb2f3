"""The wheel the README's first command installs holds every module and subpackage of memsync,
and each of them imports from the wheel alone."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_the_wheel_ships_every_module_and_each_imports(tmp_path: Path) -> None:
    # a copy of the sources: setuptools would reuse a build/ folder left in the checkout, and
    # ship modules since moved or deleted
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "__pycache__"))
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
         "--quiet", "--wheel-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("memsync-*.whl")
    files = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n for n in files if n.endswith(".py")}
    in_checkout = {str(p.relative_to(ROOT)) for p in (ROOT / "memsync").rglob("*.py")}
    assert shipped == in_checkout
    assets = {str(p.relative_to(ROOT)) for p in (ROOT / "memsync/web/assets").iterdir()}
    assert assets and assets <= files  # the search page's stylesheet and icon: package data
    names = (name[:-3].replace("/", ".").removesuffix(".__init__") for name in shipped)
    modules = sorted(name for name in names if name != "memsync.__main__")  # it runs the CLI
    check = (
        "import importlib, sys\n"
        f"sys.path.insert(0, {str(wheel)!r})\n"
        "for name in sys.argv[1:]:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert module.__file__.startswith({str(wheel)!r}), module.__file__\n"
    )
    imported = subprocess.run(
        [sys.executable, "-I", "-c", check, *modules], capture_output=True, text=True, cwd=tmp_path
    )
    assert imported.returncode == 0, imported.stderr


def test_the_install_hint_for_mcp_names_the_sdk_the_extra_pins() -> None:
    """memsync is not on a package index, so `mcp` and `serve` name the SDK itself."""
    from memsync.cli.common import MCP_INSTALL

    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    pinned = extras["mcp"][0]
    assert MCP_INSTALL.endswith(f"'{pinned}'")


def test_ruff_is_pinned_in_the_test_extra_and_run_by_ci() -> None:
    project = (ROOT / "pyproject.toml").read_text()
    assert '"ruff==' in project
    ci = (ROOT / ".ci" / "run").read_text()
    assert "ruff check" in ci and "ruff format --check" in ci
    assert not list(ROOT.glob("*.whl")), "wheels are not kept in the repository"
