"""A search request as every face is asked it (`memsync query`, memory_search, /api/search, the
page), parsed in one place into one frozen value, with one set of messages: the text checked,
each setting read as the config file's are, the filters as a user types them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields, replace

from ..config import Config, overridden
from ..errors import ArgumentError
from ..filters import note_filter
from .options import Options

# the local model on one core embeds 1,000 Chinese characters in about a second
MAX_QUERY_CHARS = 1000


@dataclass(frozen=True)
class SearchRequest:
    """What to find (`text`, checked) and how (`options`: the settings, then the filters)."""

    text: str
    options: Options


def checked_text(text: str) -> str:
    """The text of a query, refused when empty (the vector of nothing is near every short note,
    and would rank them as matches) or longer than MAX_QUERY_CHARS (runs of white space count as
    one character)."""
    if not text.strip():
        raise ArgumentError("the query is empty: give the words or the question to search for")
    length = len(" ".join(text.split()))
    if length > MAX_QUERY_CHARS:
        raise ArgumentError(
            f"the query is {length:,} characters long (at most {MAX_QUERY_CHARS:,}): "
            "ask with fewer words"
        )
    return text


def search_options(
    config: Config,
    *,
    paths: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    tags: Sequence[str] = (),
    explain: bool = False,
    **settings: object,
) -> Options:
    """How to search: `settings` as the face got them (text from a query string or a form,
    numbers and booleans from a flag or a tool's JSON; None: the configured default), read as the
    config file's are, so a bad one is the same ConfigError on every face; then the filters, a
    filter that cannot be read an ArgumentError."""
    asked = {name: value for name, value in settings.items() if value is not None}
    unknown = sorted(
        set(asked) - ({f.name for f in fields(Options)} & {f.name for f in fields(Config)})
    )
    if unknown:
        raise ArgumentError(f"a search takes no setting {unknown[0]!r}")
    chosen = overridden(config, **asked)
    only = note_filter(paths, since, until, tags)
    return replace(Options.from_settings(chosen), only=only, explain=explain)


def search_request(
    config: Config,
    text: str,
    *,
    paths: Sequence[str] = (),
    since: str | None = None,
    until: str | None = None,
    tags: Sequence[str] = (),
    explain: bool = False,
    **settings: object,
) -> SearchRequest:
    """The one parse of a search request, every face's: its text checked, then its options."""
    options = search_options(
        config, paths=paths, since=since, until=until, tags=tags, explain=explain, **settings
    )
    return SearchRequest(checked_text(text), options)
