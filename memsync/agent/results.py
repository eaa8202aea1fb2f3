"""The tree listing memory_tree gives, cut to what an agent's context holds (its shape is in
memsync.shapes)."""

from __future__ import annotations

from datetime import datetime

from ..shapes import Tree, TreeFolder, TreeNote

# notes and folded folders one answer lists: the whole tree of a vault of 6,280 notes was 1.2 MB
# (about 300k tokens), more than an agent's context holds
MOST_TREE_ENTRIES = 500


def tree_of(listing: list[tuple[str, int, int, int]], folder: str, depth: int | None) -> Tree:
    """Pure: the indexed notes below `folder`, those deeper than `depth` folded into folders.
    Without a depth, as deep as MOST_TREE_ENTRIES allows; at most that many entries, in path
    order, and `more` says what was left out."""
    prefix = f"{folder}/" if folder else ""
    levels = [path[len(prefix) :].split("/") for path, *_ in listing]
    deepest = max((len(rest) for rest in levels), default=1)
    chosen = depth
    if depth is None and len(listing) > MOST_TREE_ENTRIES and deepest > 1:
        fitting = [d for d in range(1, deepest) if _entries(levels, d) <= MOST_TREE_ENTRIES]
        chosen = max(fitting, default=1)
    listed: list[TreeNote] = []
    folded: dict[str, int] = {}
    for (path, size, mtime_ns, chunks), rest in zip(listing, levels):
        if chosen is not None and len(rest) > chosen:
            where = prefix + "/".join(rest[:chosen])
            folded[where] = folded.get(where, 0) + 1
            continue
        modified = datetime.fromtimestamp(mtime_ns / 1e9).strftime("%Y-%m-%d %H:%M")
        listed.append({"path": path, "size": size, "modified": modified, "chunks": chunks})
    folders: list[TreeFolder] = [{"path": p, "notes": n} for p, n in sorted(folded.items())]
    more = []
    if chosen != depth:
        more.append(
            f"{len(listing):,} notes in all, listed to depth {chosen}: ask with a folder (path)"
            " or a depth to see further"
        )
    entries = len(listed) + len(folders)
    if entries > MOST_TREE_ENTRIES:
        everything = [n["path"] for n in listed] + [f["path"] for f in folders]
        kept = set(sorted(everything, key=lambda path: path.split("/"))[:MOST_TREE_ENTRIES])
        listed = [n for n in listed if n["path"] in kept]
        folders = [f for f in folders if f["path"] in kept]
        more.append(
            f"the first {MOST_TREE_ENTRIES:,} of {entries:,} entries, in path order: ask for a "
            "folder (path) for the rest"
        )
    return {"path": folder, "notes": listed, "folders": folders, "more": "; ".join(more)}


def _entries(levels: list[list[str]], depth: int) -> int:
    """How many entries a listing `depth` folders deep holds: notes and folded folders."""
    notes = sum(1 for rest in levels if len(rest) <= depth)
    return notes + len({tuple(rest[:depth]) for rest in levels if len(rest) > depth})
