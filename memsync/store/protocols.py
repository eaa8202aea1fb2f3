"""What every index backend offers, a reader's half and the writer's, the rows they trade in,
and the translation of each engine's errors at its boundary; no SQL here.

Two backends implement `StoreWriter` (and so `StoreReader`): `sqlite_store` (one file per vault,
the embedded default) and `pg_store` (PostgreSQL + pgvector, one schema per vault, for teams).
Readers (search, status, the library face) use the reader's half, the writer (sync) both; `locate`
chooses the backend from `--db`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar, cast

from ..errors import StoreError
from ..filters import NoteFilter
from ..links.parse import Link

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

if TYPE_CHECKING:  # numpy is imported where vectors are handled: a no-op sync never needs it
    import numpy as np

    from ..vectors import CalibrationSample

SOURCE = "memory"


class FileRow(NamedTuple):  # a tuple: a sync loads one per note
    path: str
    hash: str
    mtime_ns: int
    size: int


@dataclass(frozen=True)
class NewChunk:
    start_line: int
    end_line: int
    hash: str
    text: str
    context: str
    fts_text: str
    overlap: int = 0  # its first lines, repeated from the note's chunk before (which embeds them)
    window_lines: str | None = None  # its windows' lines (chunking.Chunk.window_lines)


class PendingChunk(NamedTuple):
    """A chunk to embed: what chunking.embed_inputs needs, and where its vectors go."""

    id: int
    hash: str
    context: str
    text: str
    whole: bool  # its note's only chunk
    overlap: int


@dataclass(frozen=True)
class FileFacts:
    """What a note says about itself (metadata.parse), stored beside its files row."""

    title: str | None = None
    date: str | None = None  # YYYY-MM-DD
    tags: tuple[str, ...] = ()
    warning: str | None = None
    text: str | None = None  # the note as indexed: read there where the vault's files are not
    aliases: tuple[str, ...] = ()  # its other names (front matter aliases:)
    links: tuple[Link, ...] = ()  # its links to notes (links.parse)


class NoteWrite(NamedTuple):
    """A note as replace_files writes it: its files row, new chunks and what it says of itself."""

    row: FileRow
    chunks: Sequence[NewChunk]
    facts: FileFacts = FileFacts()


@dataclass(frozen=True)
class SkipRow:
    """A file left out and why; (mtime_ns, size) when the reason lasts until the file changes."""

    path: str
    reason: str
    mtime_ns: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class ModelKey:
    """Which vectors an index holds: never two models in one index."""

    provider: str
    model: str
    provider_key: str


@dataclass(frozen=True)
class ChunkRow:
    id: int
    path: str
    start_line: int
    end_line: int
    text: str
    embedding: bytes | None
    window_lines: str | None = None  # its windows' lines (Chunk.window_lines), if recorded
    script: str = "latin"  # its writing system (fts.script of its text)


class LinkRow(NamedTuple):
    """A link as the index keeps it: where it is, what it names, the note it opens (or None)."""

    source: str
    line: int
    written: str
    target: str
    anchor: str | None
    kind: str  # link or embed
    resolved: str | None
    style: str = "wiki"
    seq: int = 0  # its place among its note's links


class StoreReader(Protocol):
    """What readers of one vault's index use: search, status, the library face."""

    read_only: bool

    @property
    def vector_backend(self) -> str:
        """The index's own vector search: its engine, version and kind, the same for every
        reader."""

    @property
    def keeps_mean_vectors(self) -> bool: ...

    @property
    def behind(self) -> str:
        """ "" for an index of this release's schema; else, in one line, that the answers come
        from an older one as it is and who brings it up to date (a reader never migrates)."""

    def close(self) -> None: ...
    def __enter__(self) -> StoreReader: ...
    def __exit__(self, *exc: object) -> None: ...

    def meta(self) -> dict[str, str]: ...
    def model_key(self) -> ModelKey | None: ...
    def dims(self) -> int | None: ...
    def file_stats(self) -> dict[str, tuple[int, int]]: ...
    def file_hashes(self, paths: Sequence[str]) -> dict[str, str]: ...
    def listing(self, folder: str = "") -> list[tuple[str, int, int, int]]: ...
    def file_warnings(self) -> list[tuple[str, str]]: ...
    def indexed_text(self, path: str) -> tuple[str, float] | None: ...
    def skip_rows(self) -> dict[str, SkipRow]: ...
    def has_vectors(self) -> bool: ...
    def pending_count(self) -> int: ...
    def counts(self) -> dict[str, int]: ...
    def chunks(self, ids: Sequence[int]) -> dict[int, ChunkRow]: ...
    def second_connection(self) -> StoreReader: ...
    def note_chunks(self, path: str) -> list[ChunkRow]:
        """A note's chunks in the order of its lines, with their vectors."""

    def word_chunks(self, words: Sequence[str]) -> tuple[int, dict[str, int]]:
        """(the chunks in the index, how many hold each word as its keyword index spells it)."""

    @property
    def has_links(self) -> bool:
        """Whether the index holds links: an older release's gains them from its writer."""

    def outgoing_links(self, path: str) -> list[LinkRow]: ...
    def backlinks(self, path: str) -> list[LinkRow]: ...
    def unresolved_links(self) -> list[LinkRow]: ...
    def ambiguous_links(self) -> list[LinkRow]: ...
    def link_counts(self) -> tuple[int, int]: ...
    def open_named(self, by: str, keys: Sequence[str], folder: str = "") -> str | None:
        """The note a link from `folder` asking `by` (path, name, alias) for `keys` opens."""

    def note_names(self, paths: Sequence[str]) -> dict[str, list[tuple[str, str]]]:
        """Each note's names besides its file name, as (kind, name): its title, its aliases."""

    def sample_vectors(self, size: int) -> CalibrationSample:
        """Up to `size` chunks spread over the index, every window of each, with their scripts."""

    def sample_scripts(self, size: int) -> set[str]:
        """The scripts of up to `size` chunks spread over the index, vectors or not."""

    def keyword_search(
        self, terms: Sequence[str], any_term: bool, limit: int, only: NoteFilter = ...
    ) -> tuple[list[tuple[int, float]], float | None]:
        """(chunk id, FTS5-style bm25 rank: lower is better, < 0) best first for the chunks that
        hold every term (any term with `any_term`; a term of several words is a phrase), and the
        best rank in the whole index, which calibrates a filtered search as the unfiltered one.
        `terms` come from fts.query_terms: no user character is ever query syntax."""
        ...

    def vector_search(
        self,
        query: np.ndarray,
        limit: int,
        only: NoteFilter = ...,
        probes: Sequence[np.ndarray] = (),
        every: bool = False,
    ) -> list[tuple[int, float]]:
        """(chunk id, cosine distance) nearest first; `only` applies before the k nearest. The
        coarse step chooses coarse_pool(limit) chunks nearest the query and as many nearest each
        of `probes` (other directions to look in), all scored against the query; the `limit`
        nearest are returned, or with `every` all of them."""
        ...


class StoreWriter(StoreReader, Protocol):
    """What the one writer of an index (sync, the embedding worker) uses besides. Every write
    method is one transaction: a crash leaves the index as it was before the call or after it."""

    def __enter__(self) -> StoreWriter: ...
    def upgrade(self) -> None:
        """This release's schema, migrated in place: only under the writer lock."""

    def transaction(self) -> AbstractContextManager[None]: ...
    def record(self, **facts: str | float) -> None: ...
    def mark_synced(self, **facts: str) -> None: ...
    def set_model(self, key: ModelKey, dims: int) -> None: ...
    def touch_file(self, row: FileRow, day: str | None = None) -> None: ...
    def replace_file(
        self, row: FileRow, chunks: Sequence[NewChunk], facts: FileFacts = ...
    ) -> None: ...
    def replace_files(self, notes: Sequence[NoteWrite]) -> None: ...
    def links_held(self) -> AbstractContextManager[None]:
        """Within it, replace_files holds links aside; they are resolved together at its end."""

    def settle_links(self) -> None:
        """Links a pass that did not end left held, resolved now."""

    def move_file(self, old: str, row: FileRow, day: str) -> None: ...
    def remove_file(self, path: str, skip: SkipRow | None = None) -> None: ...
    def update_skips(
        self, add: Iterable[SkipRow] = (), drop: Iterable[str] = (), *, replace_all: bool = False
    ) -> None: ...
    def pending_chunks(self, limit: int, any_chunk: bool = False) -> list[PendingChunk]: ...
    def cached_embeddings(
        self, key: ModelKey | None, hashes: Sequence[str]
    ) -> dict[str, bytes]: ...
    def store_embeddings(
        self, key: ModelKey, items: Sequence[tuple[int, str, bytes]], dims: int
    ) -> int: ...
    def prune_cache(self, older_than_days: float = 30.0) -> None: ...
    def loading_vectors(self, count: int) -> AbstractContextManager[None]: ...


def spread_ids(low: int, high: int, size: int) -> list[int]:
    """Up to `size` ids spread evenly over low..high: a cheap sample of the stored vectors."""
    if size <= 0 or high < low:
        return []
    count = min(size, high - low + 1)
    step = (high - low) / max(count - 1, 1)
    return sorted({low + round(i * step) for i in range(count)})


Translate = Callable[[BaseException], StoreError | None]


def _guarded(function: Callable[..., Any], translate: Translate) -> Callable[..., Any]:
    @functools.wraps(function)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except StoreError:
            raise
        except Exception as exc:
            problem = translate(exc)
            if problem is None:
                raise
            raise problem from exc
        if isinstance(result, AbstractContextManager) and not (
            args and isinstance(result, type(args[0]))  # the store itself, or second_connection()'s
        ):
            return _GuardedContext(result, translate)  # a transaction commits in its __exit__
        return result

    return guarded


class _GuardedContext(AbstractContextManager[Any]):
    def __init__(self, inner: AbstractContextManager[Any], translate: Translate) -> None:
        self.inner = inner
        self.translate = translate

    def __enter__(self) -> Any:
        return _guarded(self.inner.__enter__, self.translate)()

    def __exit__(self, *exc: Any) -> bool | None:
        handled: bool | None = _guarded(self.inner.__exit__, self.translate)(*exc)
        return handled


def translating(translate: Translate) -> Callable[[type[T]], type[T]]:
    """A backend's class decorator: its public methods (inherited ones too) raise memsync's
    StoreError for the engine's own errors, as httpx's transports raise httpx's errors; so
    nothing above the store needs to know an engine's exceptions."""

    def decorate(cls: type[T]) -> type[T]:
        for name in dir(cls):
            if name.startswith("_") and name != "__init__":
                continue
            member = inspect.getattr_static(cls, name)
            if isinstance(member, property) and member.fget is not None:
                setattr(cls, name, property(_guarded(member.fget, translate)))
            elif inspect.isfunction(member):
                setattr(cls, name, _guarded(member, translate))
        return cls

    return decorate


def translated(translate: Translate) -> Callable[[F], F]:
    """The same for a backend's module-level entry points."""

    def decorate(function: F) -> F:
        return cast(F, _guarded(function, translate))

    return decorate
