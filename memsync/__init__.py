"""memsync: a fresh, offline, searchable index of a Markdown vault."""

from importlib.metadata import PackageNotFoundError, version

try:  # one declaration of the version: pyproject.toml's, as installed
    __version__ = version("memsync")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"
