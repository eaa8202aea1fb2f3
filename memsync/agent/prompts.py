"""What the MCP server's prompts hand an agent, pure: the request in the user's words, then the
notes' own lines with their citations (the search's, a note with its links, daily notes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mcp.server.mcpserver.prompts.base import UserMessage
from mcp.types import EmbeddedResource, TextResourceContents

from .. import output
from .resources import MARKDOWN, note_uri

if TYPE_CHECKING:
    from ..notes import Lines, NoteLinks
    from ..shapes import SearchResult

# the text of daily notes one review hands over: about 32k tokens, a share of an agent's context
MOST_REVIEW_BYTES = 128 * 1024


def recall(topic: str, result: SearchResult) -> list[UserMessage]:
    """The search's cited lines about `topic`, and how to answer from them."""
    ask = (
        f"What do my notes say about {topic}? Answer from the lines below, citing each fact "
        "as path#Lstart-Lend; read more of a note with memory_get where a line is not enough, "
        "and say so plainly where the notes do not cover it."
    )
    return [UserMessage(ask), UserMessage(output.search_text(result))]


def gathered(note: Lines, found: NoteLinks) -> list[UserMessage]:
    """A note's text, then what it links to and the lines of other notes that link to it."""
    ask = (
        f"Here is my note {note.path}, with the notes it links to and the lines of other notes "
        "that link to it. Sum up what it says and how it connects to the rest of my notes; "
        "read a linked note with memory_get when it matters, and cite path#Lstart-Lend."
    )
    return [UserMessage(ask), _embedded(note), UserMessage(output.links_text(found))]


def review(first: str, last: str, notes: Sequence[Lines], left: Sequence[str]) -> list[UserMessage]:
    """The daily notes of first..last, oldest first, and the ones left out for room."""
    if not notes and not left:
        return [UserMessage(f"I have no daily notes from {first} to {last}: say so.")]
    ask = (
        f"Review my daily notes from {first} to {last}: what happened, what was decided, and "
        "what is still open (unchecked tasks, questions, follow-ups). Cite path#Lstart-Lend."
    )
    if left:
        ask += (
            f" {len(left)} more note(s) did not fit here; read them with memory_get if needed: "
            + ", ".join(left)
        )
    return [UserMessage(ask), *(_embedded(note) for note in notes)]


def fitting(sizes: Sequence[int], room: int = MOST_REVIEW_BYTES) -> int:
    """Pure: how many of the notes, in order, fit in `room` bytes (at least the first)."""
    used = 0
    for count, size in enumerate(sizes):
        used += size
        if used > room and count > 0:
            return count
    return len(sizes)


def _embedded(note: Lines) -> UserMessage:
    contents = TextResourceContents(uri=note_uri(note.path), mime_type=MARKDOWN, text=note.text)
    return UserMessage(EmbeddedResource(type="resource", resource=contents))
