"""The vault on disk: which files are notes, their stat, and their text read safely (never written)."""

from __future__ import annotations

import codecs
import errno
import hashlib
import os
import stat as stat_mod
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from . import confined
from .config import current
from .errors import VaultError
from .text import NOTE_SUFFIXES, as_text, fold, is_utf8

SKIPPED_DIRS = frozenset({"node_modules", "__pycache__"})
IGNORE_FILE = ".memsyncignore"
_BINARY_SNIFF = 8192


class FileStat(NamedTuple):  # a tuple: a walk makes one per note, cheaper than a dataclass
    path: str  # relative to the vault, POSIX separators
    mtime_ns: int
    size: int


@dataclass(frozen=True)
class Skip:
    path: str
    reason: str


@dataclass(frozen=True)
class Note:
    path: str
    text: str
    hash: str  # sha256 of the bytes on disk
    mtime_ns: int
    size: int
    warning: str | None = None


class SkipFile(Exception):
    """A note that cannot be indexed; the reason is shown to the user. `lasting`: the reason holds
    until the file changes (too large, binary), so the file is not read again until then."""

    def __init__(self, reason: str, lasting: bool = True) -> None:
        super().__init__(reason)
        self.lasting = lasting


@dataclass
class Scan:
    files: dict[str, FileStat] = field(default_factory=dict)
    skipped: list[Skip] = field(default_factory=list)


class IgnoreRules:
    """Hidden folders and files, node_modules, and gitignore patterns from .memsyncignore; the
    patterns match names case-folded, so `drafts/` also keeps out `Drafts/` and `DRAFTS/`."""

    def __init__(self, root: Path) -> None:
        self._spec = None
        try:  # read like a note: a symlink to outside the vault is not followed there
            with confined.locate(root, IGNORE_FILE) as place:
                fd = place.open_file()
            with open(fd, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except (confined.Refused, OSError):
            return
        import pathspec

        try:
            self._spec = pathspec.GitIgnoreSpec.from_lines([fold(line) for line in lines])
        except ValueError:
            self._spec = None

    def skips_dir(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") or fold(name) in SKIPPED_DIRS:
            return True
        return self._spec is not None and self._spec.match_file(fold(rel) + "/")

    def skips_file(self, rel: str) -> bool:
        name = rel.rsplit("/", 1)[-1]
        if name.startswith(".") or not name.lower().endswith(NOTE_SUFFIXES):
            return True
        return self._spec is not None and self._spec.match_file(fold(rel))

    def skips_folder(self, rel: str) -> bool:
        """For a folder from an event: it, or any folder above it, is skipped."""
        parts = PurePosixPath(rel).parts
        return any(self.skips_dir("/".join(parts[:i])) for i in range(1, len(parts) + 1))

    def skips_path(self, rel: str) -> bool:
        """For a file from an event: any skipped folder on the way, or a skipped file."""
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        return (bool(parent) and self.skips_folder(parent)) or self.skips_file(rel)


def vault_root(path: str | os.PathLike[str]) -> Path:
    """The vault's real path, from the command's own folder (messages name it as given)."""
    invocation = current()
    given = invocation.expanded(path)
    root = invocation.path(path)
    if not root.exists():
        raise VaultError(f"vault not found: {given}")
    if not root.is_dir():
        raise VaultError(f"vault is not a folder: {given}")
    real = root.resolve()
    if not is_utf8(str(real)):  # the index keeps the vault's path, and its notes', as text
        raise VaultError(f"the vault's path {as_text(str(real))} is not UTF-8: rename the folder")
    return real


def _realpath(path: str) -> str | None:
    """The real path, or None when the path changed while it was resolved (a link swapped in and
    out makes realpath fail with EINVAL)."""
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _relative(real: str, root_real: str) -> str:
    """A real path inside the vault as a vault-relative path with `/` ("." for the vault)."""
    return os.path.relpath(real, root_real).replace(os.sep, "/")


def _judge_file(
    root_real: str, rel: str, path: str, rules: IgnoreRules, is_link: bool
) -> FileStat | Skip | None:
    """The one decision, for a walk and for an event alike: is this file a note to index?
    None means not a note at all (ignored, a folder, gone); a Skip says why a note is left out."""
    if rules.skips_file(rel):
        return None
    if not is_utf8(rel):
        return Skip(as_text(rel), "file name is not valid UTF-8: rename the file to index it")
    real = _realpath(path) if is_link else None
    if is_link:
        if real is None:
            return Skip(rel, "changed while being read: a symlink on its way was swapped")
        if not confined.inside(real, root_real):
            return Skip(rel, "symlink to a file outside the vault")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Skip(rel, "broken symlink") if os.path.islink(path) else None  # else: not there
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return Skip(rel, "symlink loop")
        return Skip(rel, f"cannot stat: {exc.strerror}")
    if real is not None:
        target = _relative(real, root_real)
        if target != rel and not rules.skips_path(target):
            return Skip(rel, f"another name for {target}, which is indexed under its own name")
    if stat_mod.S_ISDIR(st.st_mode):
        return None  # a folder named like a note (an event's path): its notes come on their own
    if not stat_mod.S_ISREG(st.st_mode):
        return Skip(rel, "not a regular file (a pipe, socket or device)")
    return FileStat(rel, st.st_mtime_ns, st.st_size)


def scan(root: Path, rules: IgnoreRules | None = None, under: str = "") -> Scan:
    """Stat every note below root (or its folder `under`) without reading any; symlinks are
    followed only inside the vault, and a second name for an indexed note or folder is skipped."""
    rules = rules or IgnoreRules(root)
    result = Scan()
    root_real = os.path.realpath(root)
    seen_dirs: set[str] = set()  # real paths walked: ends loops and second ways to a folder
    start = root / under if under else root
    start_real = _realpath(str(start))
    if not start.is_dir() or start_real is None or not confined.inside(start_real, root_real):
        return result  # gone, swapped while resolved, or a symlink out: no note of the vault there
    # (path, relative path, real path); folders reached through a symlink are walked last, so the
    # real path of a folder wins over an alias of it
    stack: list[tuple[str, str, str]] = [(str(start), under, start_real)]
    linked: list[tuple[str, str, str]] = []
    while stack or linked:
        folder, rel_folder, folder_real = stack.pop() if stack else linked.pop(0)
        if folder_real in seen_dirs:
            continue
        seen_dirs.add(folder_real)
        try:
            entries = list(os.scandir(folder))
        except OSError as exc:
            result.skipped.append(
                Skip(as_text(rel_folder or "."), f"cannot list folder: {exc.strerror}")
            )
            continue
        for entry in entries:
            rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
            try:
                is_link = entry.is_symlink()
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_link, is_dir = True, False  # a loop: _judge_file says so
            if not is_dir:
                verdict = _judge_file(root_real, rel, entry.path, rules, is_link)
                if isinstance(verdict, FileStat):
                    result.files[rel] = verdict
                elif verdict is not None:
                    result.skipped.append(verdict)
                continue
            if rules.skips_dir(rel):
                continue
            if not is_utf8(entry.name):
                result.skipped.append(Skip(as_text(rel), "folder name is not valid UTF-8"))
                continue
            if not is_link:  # no need to ask the kernel: the parent's real path + name
                stack.append((entry.path, rel, os.path.join(folder_real, entry.name)))
                continue
            real = _linked_folder(root_real, rel, entry.path, rules)
            if isinstance(real, Skip):
                result.skipped.append(real)
            else:
                linked.append((entry.path, rel, real))
    return result


def _linked_folder(root_real: str, rel: str, path: str, rules: IgnoreRules) -> str | Skip:
    """The real path of a symlinked folder `scan` may walk, or why it is skipped: it points
    outside the vault, or at a folder indexed under its own name already."""
    real = _realpath(path)
    if real is None:
        return Skip(rel, "changed while being listed: a symlink was swapped")
    if not confined.inside(real, root_real):
        return Skip(rel, "symlink to a folder outside the vault")
    target = _relative(real, root_real)
    if target == "." or not rules.skips_folder(target):
        where = "the vault itself" if target == "." else f"{target}/"
        return Skip(rel, f"symlink to {where}, whose notes are indexed under their own names")
    return real


def note_at(root: Path, rel: str, rules: IgnoreRules) -> FileStat | Skip | None:
    """One path named by an event, judged exactly as `scan` judges it."""
    parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if parent and rules.skips_folder(parent):
        return None
    root_real = os.path.realpath(root)
    path = os.path.join(root_real, rel)
    through_link = _realpath(path) != path  # the file, or a folder on its way, is a symlink
    return _judge_file(root_real, rel, path, rules, through_link)


def why_not_creatable(root: Path, rel: str) -> str | None:
    """Why a new note cannot be made at `rel`, or None: something other than a note is there, or
    the nearest folder on its way that exists is a symlink (the note would live under another
    name than the one it is indexed by)."""
    root_real = os.path.realpath(root)
    path = os.path.join(root_real, rel)
    if os.path.lexists(path):
        return "something other than a note file is there"
    folder = os.path.dirname(path)
    while not os.path.lexists(folder):
        folder = os.path.dirname(folder)
    if _realpath(folder) != folder or not confined.inside(folder, root_real):
        return "a folder on its way is a symlink"
    return None


def read_note(root: Path, rel: str, max_bytes: int) -> Note:
    """Read a note's bytes once (bounded) through a descriptor walked inside the vault, hash them
    and decode; raise SkipFile with the reason."""
    try:
        with confined.locate(root, rel) as place:
            fd = place.open_file()
        with open(fd, "rb") as handle:
            st = os.fstat(handle.fileno())
            if st.st_size > max_bytes:
                raise SkipFile(
                    f"too large ({st.st_size / 1048576:.1f} MB > max_file_mb "
                    f"{max_bytes / 1048576:g} MB)"
                )
            data = handle.read(max_bytes + 1)
    except confined.Refused as refused:
        raise SkipFile(str(refused), lasting=False) from None
    except (FileNotFoundError, NotADirectoryError):
        raise SkipFile("vanished before it could be read", lasting=False) from None
    except PermissionError:
        raise SkipFile("permission denied", lasting=False) from None
    except IsADirectoryError:
        raise SkipFile("is a folder", lasting=False) from None
    except OSError as exc:
        raise SkipFile(f"cannot read: {exc.strerror or exc}", lasting=False) from None
    if len(data) > max_bytes:
        raise SkipFile(f"grew past max_file_mb {max_bytes / 1048576:g} MB while being read")
    digest = hashlib.sha256(data).hexdigest()
    text, warning = decode(data)
    return Note(rel, text, digest, st.st_mtime_ns, st.st_size, warning)


_BOMS = (  # longest first: UTF-32-LE's mark begins with UTF-16-LE's
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode(data: bytes) -> tuple[str, str | None]:
    """A note's text and, when it was not plain UTF-8, a warning that says what was assumed."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding), f"decoded as {encoding.upper()} (byte-order mark)"
            except UnicodeDecodeError:
                break
    if b"\x00" in data[:_BINARY_SNIFF]:
        raise SkipFile("binary file (NUL bytes), not text")
    try:
        return data.decode("utf-8-sig"), None
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace"), (
            "invalid UTF-8, decoded with replacement characters"
        )
