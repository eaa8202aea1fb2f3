"""The schema of an index as named steps, shared by both backends (sqlite_store, pg_schema):
each step's number as released, what it adds for readers, and the rules of who applies them
(a writer holding the lock migrates; a reader answers from an older schema as it is, or
refuses one it cannot read, naming who must upgrade it)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..errors import StoreError
from ..links.resolve import names_of
from .origin import Origin


@dataclass(frozen=True)
class Migration:
    """One named step of an index's schema. `schema` is the number an index records once the
    step is applied (its schema_version): numbers stay as released, so an index never takes a
    step twice."""

    name: str
    schema: int
    sql: str = ""  # its statements, run at once
    adds: tuple[str, ...] = ()  # what readers read that it adds ("table", "table.column", "meta.k")
    then: Callable[[Any], None] | None = None  # with the store, after its SQL: what SQL cannot say


def overlap_step(schema: int) -> Migration:
    """How many of a chunk's first lines repeat the chunk before, which embeds them (a chunk's
    windows cover its own lines and one line in front: chunking.embed_inputs)."""
    sql = "ALTER TABLE chunks ADD COLUMN overlap INTEGER NOT NULL DEFAULT 0"
    return Migration("overlap", schema, sql)


def window_lines_step(schema: int) -> Migration:
    """The lines of each of a chunk's windows (chunking.Chunk.window_lines), for the lines a
    query shows; NULL until `index` chunks the notes again (the chunker's rules say `spans`)."""
    sql = "ALTER TABLE chunks ADD COLUMN windows TEXT"
    return Migration("window lines", schema, sql, adds=("chunks.windows",))


def script_step(schema: int) -> Migration:
    """Each chunk's writing system (fts.script of its text), recorded by the writer: a query
    reads it for its candidates and its calibration sample instead of detecting it from their
    text; the chunks indexed before get theirs in the step."""
    sql = "ALTER TABLE chunks ADD COLUMN script TEXT"
    return Migration("chunk scripts", schema, sql, adds=("chunks.script",), then=_record_scripts)


def links_step(schema: int) -> Migration:
    """Each note's links and names (sql_links); filled as the writer reads every note again
    (metadata's rules changed with them), the names of the notes indexed before in the step."""
    sql = """
    CREATE TABLE links(
        source TEXT NOT NULL, folder TEXT NOT NULL, seq INTEGER NOT NULL, line INTEGER NOT NULL,
        written TEXT NOT NULL,
        target TEXT NOT NULL, anchor TEXT, kind TEXT NOT NULL, style TEXT NOT NULL,
        wants TEXT NOT NULL, want_key TEXT NOT NULL, alt_key TEXT, resolved TEXT);
    CREATE INDEX links_source ON links(source);
    CREATE INDEX links_want ON links(want_key);
    CREATE INDEX links_alt ON links(alt_key) WHERE alt_key IS NOT NULL;
    CREATE INDEX links_resolved ON links(resolved);
    CREATE TABLE names(path TEXT NOT NULL, folder TEXT NOT NULL, kind TEXT NOT NULL,
        name TEXT NOT NULL, key TEXT NOT NULL);
    CREATE INDEX names_key ON names(key);
    CREATE INDEX names_path ON names(path);
    """
    return Migration("links", schema, sql, adds=("links",), then=_name_notes)


def held_links_step(schema: int) -> Migration:
    """Where a pass of many notes holds their links until it resolves them all at once
    (sql_links.links_held): in the order written, without an index to keep up."""
    sql = """
    CREATE TABLE held_links(
        source TEXT NOT NULL, folder TEXT NOT NULL, seq INTEGER NOT NULL, line INTEGER NOT NULL,
        written TEXT NOT NULL, target TEXT NOT NULL, anchor TEXT, kind TEXT NOT NULL,
        style TEXT NOT NULL, wants TEXT NOT NULL, want_key TEXT NOT NULL, alt_key TEXT);
    CREATE TABLE held_names(path TEXT NOT NULL, folder TEXT NOT NULL, kind TEXT NOT NULL,
        name TEXT NOT NULL, key TEXT NOT NULL);
    """
    return Migration("held links", schema, sql)


def _name_notes(store: Any) -> None:
    rows = [row for (path,) in store._rows("SELECT path FROM files") for row in names_of(path, [])]
    store._name("names", rows)


def _record_scripts(store: Any) -> None:
    store._record_scripts()  # sql_tables': the shared tables' SQL lives there


def added_in(steps: Sequence[Migration]) -> dict[str, int]:
    """What each step added that readers read: the schema from which an index holds it."""
    return {name: step.schema for step in steps for name in step.adds}


class SchemaSteps:
    """An index's schema as opened, and its steps up to this release's."""

    conn: Any  # the engine's connection

    MIGRATIONS: Sequence[Migration] = ()  # the engine's schema, step by step
    SCHEMA_VERSION: int = 0  # the engine's newest schema
    READABLE_FROM: int = 1  # the oldest schema a reader answers from as it is
    # what a later schema added that readers read (as Migration.adds names it): the schema that did
    ADDED_IN: dict[str, int] = {}
    schema: int = 0  # the index's schema as opened: a reader may answer from an older one
    read_only: bool = False
    label: str = "the index"  # how messages name it: "index /path", "vault notes"

    def _schema_version(self) -> int:
        raise NotImplementedError

    def _record_schema(self, number: int) -> None:
        """Where the engine keeps the schema number besides meta's schema_version."""

    def transaction(self) -> AbstractContextManager[None]:
        raise NotImplementedError

    def meta(self) -> dict[str, str]:
        raise NotImplementedError

    def set_meta(self, **values: str | float) -> None:
        raise NotImplementedError

    def _chunks_changed(self) -> None:
        """In a writer's transaction that changes the chunks or their vectors (a schema step may):
        where an engine's readers need it, a version of them that every connection reads alike."""

    def _open_schema(self, writer: bool) -> None:
        """A writer (it holds the writer lock: index, watch) brings the index to this release's
        schema; a reader never changes it: it answers from an older schema as it is, or refuses
        one it cannot read, naming who must upgrade it. A newer schema is refused."""
        self.schema = self._schema_version()
        if self.schema > self.SCHEMA_VERSION:
            raise StoreError(
                f"{self.label} has schema {self.schema}, newer than this memsync "
                f"({self.SCHEMA_VERSION}): upgrade memsync"
            )
        if writer:
            self.upgrade()
        elif self.schema == 0:
            raise StoreError(f"{self.label} is still being created: try again in a moment")
        elif self.schema < self.READABLE_FROM:
            raise StoreError(
                f"{self.label} has schema {self.schema}, older than this memsync reads: "
                f"{self._upgrader()} must run this release's memsync index or watch first"
            )

    def upgrade(self) -> None:
        """The schema's steps up to this release's, each in its own transaction; only a
        writer holding the writer lock calls this, and one this user cannot write is refused."""
        if self._schema_version() < self.SCHEMA_VERSION and self.read_only:
            raise StoreError(
                f"{self.label} needs an upgrade that this user cannot write: run memsync "
                "index as its owner"
            )
        current = self._schema_version()
        for step in [s for s in self.MIGRATIONS if current < s.schema <= self.SCHEMA_VERSION]:
            with self.transaction():
                if self._schema_version() >= step.schema:
                    continue  # another writer (a query's refresh, index) applied it meanwhile
                self._migrate(step)
        self.schema = self.SCHEMA_VERSION

    def _migrate(self, step: Migration) -> None:
        """One step and its record, inside upgrade's transaction."""
        if step.sql:
            self.conn.execute(step.sql)
        if step.then is not None:
            step.then(self)
        self._record_schema(step.schema)
        self.set_meta(schema_version=step.schema)
        self._chunks_changed()

    @property
    def behind(self) -> str:
        """ "" for an index of this release's schema; else what a reader of an older one says
        (read again: a writer may have upgraded it since)."""
        if self.schema < self.SCHEMA_VERSION:
            self.schema = self._schema_version()
        if self.schema >= self.SCHEMA_VERSION:
            return ""
        return (
            f"{self.label} is behind an older memsync's rules (schema {self.schema}, this "
            f"release's is {self.SCHEMA_VERSION}): answers come from it as it is, not refreshed; "
            f"{self._upgrader()} brings it up to date with this release's memsync index or watch"
        )

    def _upgrader(self) -> str:
        """Who may upgrade the index: its vault's writer, on the host it records, else of its
        folder."""
        origin = Origin.of(self.meta())
        if origin.host:
            return f"the vault's writer on host {origin.host}"
        return f"the writer of {origin.path}" if origin.path else "its writer"

    def _has(self, name: str) -> bool:
        """Whether the index holds a table or `table.column` that a later schema added."""
        return self.schema >= self.ADDED_IN.get(name, 1)

    def _column(self, name: str) -> str:
        """`table.column`'s column, or NULL in an older index without it: what a writer's
        migration would hold there until `index` fills it."""
        return name.partition(".")[2] if self._has(name) else "NULL"

    def _tags(self) -> str:
        """The tags table, or none in an older index without it."""
        return "tags" if self._has("tags") else "(SELECT NULL AS path, NULL AS tag WHERE 1 = 0)"
