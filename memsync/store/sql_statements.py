"""How the shared tables' SQL reaches an engine: rows out, statements in, long `IN (...)` lists
in batches. Each engine implements `_rows` and `_run_many`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from .sql_schema import SchemaSteps

BATCH = 500  # ids or paths per `IN (...)`: well under either engine's limit on parameters


def marks(count: int) -> str:
    return ",".join("?" * count)


class Statements(SchemaSteps):
    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise NotImplementedError

    def _run_many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        raise NotImplementedError

    def _batches(self, sql: str, values: Sequence[Any], *args: Any) -> Iterator[tuple[Any, ...]]:
        """`sql` with its `({marks})` filled for BATCH values at a time; `args` come first."""
        unique = list(dict.fromkeys(values))
        for start in range(0, len(unique), BATCH):
            part = unique[start : start + BATCH]
            yield from self._rows(sql.format(marks=marks(len(part))), [*args, *part])
