"""agent.results: the tree listing cut to what an agent's context holds."""

from __future__ import annotations

from memsync.agent.results import MOST_TREE_ENTRIES, tree_of
from memsync.output import tree_text


def _listing(paths: list[str]) -> list[tuple[str, int, int, int]]:
    return [(path, 100, 1_700_000_000_000_000_000, 1) for path in paths]


def test_a_vault_too_large_to_list_whole_is_listed_as_deep_as_fits() -> None:
    """An agent's memory_tree of a 6,280-note vault was 1.2 MB: past any context window."""
    nested = _listing(
        [f"lang{i}/topic{j}/note{k}.md" for i in range(30) for j in range(20) for k in range(3)]
    )
    tree = tree_of(nested, "", None)
    assert tree["notes"] == [] and len(tree["folders"]) == 30  # 600 folders at depth 2: too many
    assert tree["more"].startswith("1,800 notes in all, listed to depth 1")
    assert tree_text(tree).endswith(f"({tree['more']})")
    one = [row for row in nested if row[0].startswith("lang3/")]  # what memory.tree("lang3") lists
    assert (
        tree_of(one, "lang3", None)["more"] == ""
        and len(tree_of(one, "lang3", None)["notes"]) == 60
    )
    # one flat folder: the first entries in path order, and how many were left out
    flat = _listing([f"daily/2026-{k:04d}.md" for k in range(MOST_TREE_ENTRIES + 100)])
    tree = tree_of(flat, "daily", None)
    assert [n["path"] for n in tree["notes"]] == [p for p, *_ in flat[:MOST_TREE_ENTRIES]]
    assert tree["more"] == (
        f"the first {MOST_TREE_ENTRIES} of {MOST_TREE_ENTRIES + 100} entries, in path order: "
        "ask for a folder (path) for the rest"
    )
