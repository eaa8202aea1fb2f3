"""The one exception tree of memsync.

    MemsyncError                  base: the CLI prints its message on one line, exit 1
     ├── ConfigError              a bad setting (file, env or flag); `usage`: one that can never
     │                            work, wherever it is set (exit 2)
     ├── VaultError               the vault path is missing or not a folder
     ├── IndexNotFound            no index for that vault / db
     │    └── AmbiguousIndex      several vaults are indexed and none was named (exit 2)
     ├── StoreError               the database failed or cannot be opened; `reopen`: a database
     │                            error after opening (a dropped connection), opening again may help
     ├── LockError                another writer (index or watch) holds this index
     ├── VaultTaken               the index belongs to another folder or host (index, watch)
     ├── UnsafeFile               a file memsync trusts (the token file) or its folder is a link,
     │                            or another user could have written it
     ├── ArgumentError            an argument refused: a path outside the vault, hidden or not a
     │    │                       note, a line range past the end, a write memsync will not make
     │    └── NoSuchNote          no note at that path (on disk, or in the index elsewhere)
     └── EmbeddingError           the embedding provider failed
          ├── EmbeddingAuthError      401/403: the key is missing or wrong
          ├── EmbeddingConfigError    404, unknown provider, model not installed
          ├── EmbeddingResponseError  malformed answer or vectors of the wrong size
          └── EmbeddingUnavailable    timeouts, refused connections, 429/5xx after retries

Lower-level exceptions are translated where they happen with ``raise X(...) from exc``: each
store backend raises StoreError from its public methods for its engine's errors, as httpx's
transports raise httpx's own errors, so callers above the store catch memsync's errors only.
"""

from __future__ import annotations

import errno


class MemsyncError(Exception):
    """Base of every error memsync reports to the user."""


class ConfigError(MemsyncError):
    def __init__(self, message: str, settings: tuple[str, ...] = (), usage: bool = False) -> None:
        super().__init__(message)
        self.settings = settings  # the settings at fault: a bad flag is a usage error (exit 2)
        self.usage = usage


class VaultError(MemsyncError):
    pass


class IndexNotFound(MemsyncError):
    pass


class AmbiguousIndex(IndexNotFound):
    pass


class StoreError(MemsyncError):
    def __init__(self, message: str, reopen: bool = False) -> None:
        super().__init__(message)
        self.reopen = reopen


class LockError(MemsyncError):
    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid


class VaultTaken(MemsyncError):
    pass


class UnsafeFile(MemsyncError):
    pass


class ArgumentError(MemsyncError):
    pass


class NoSuchNote(ArgumentError):
    pass


class EmbeddingError(MemsyncError):
    pass


class EmbeddingAuthError(EmbeddingError):
    pass


class EmbeddingConfigError(EmbeddingError):
    pass


class EmbeddingResponseError(EmbeddingError):
    pass


class EmbeddingUnavailable(EmbeddingError):
    pass


DISK_FULL = "the disk is full: free some space, then run this again"


def os_reason(exc: OSError) -> str:
    """What an operating system error means for the user: a full disk says so, and what to do."""
    if exc.errno == errno.ENOSPC:
        return DISK_FULL
    return exc.strerror or str(exc)
