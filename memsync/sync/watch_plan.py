"""Which folders of a vault the watcher watches: the fewest watches that see every indexed
folder and no skipped one."""

from __future__ import annotations

import os
from pathlib import Path

from ..vault import IgnoreRules


def subfolders(root: Path, rel: str) -> list[str]:
    """The folders in a vault folder (not symlinks to one), vault-relative, by name."""
    try:
        with os.scandir(root / rel) as entries:
            names = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [f"{rel}/{name}" if rel else name for name in names]


def watch_roots(root: Path, rules: IgnoreRules) -> list[tuple[str, bool]]:
    """The fewest folder watches that see every indexed folder and no skipped one, as
    (vault-relative folder, recursive); "" is the vault. A folder with no skipped folder anywhere
    below it is watched as one tree; any other folder alone, its subfolders planned alike. A
    git vault is then a handful of watches, none of them on .git/objects."""
    order: list[str] = []  # folders, each before its subfolders
    kept: dict[str, list[str]] = {}  # folder -> its subfolders that are not skipped
    clean: dict[str, bool] = {}  # no skipped folder anywhere below
    stack = [""]
    while stack:  # iterative: a vault may be deeper than Python's recursion limit
        rel = stack.pop()
        order.append(rel)
        children = subfolders(root, rel)
        kept[rel] = [c for c in children if not rules.skips_dir(c)]
        clean[rel] = len(kept[rel]) == len(children)
        stack += kept[rel]
    for rel in reversed(order):  # subfolders first
        clean[rel] = clean[rel] and all(clean[c] for c in kept[rel])
    plan: list[tuple[str, bool]] = []
    split: set[str] = set()  # planned folders watched alone
    for rel in order:
        parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
        if rel and parent not in split:
            continue  # inside a tree watched whole
        plan.append((rel, clean[rel]))
        if not clean[rel]:
            split.add(rel)
    return plan
