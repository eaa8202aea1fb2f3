"""`memsync related`: recall@10 against a page's link neighbours, and its latency through `serve`.

    python -m benchmarks.bench_related HELP [--tune en] [--held-out de es fr it nl]
                                       [--work DIR] [--latency-notes 10000] [--runs 100]

HELP is a copy of Obsidian's help (github.com/obsidianmd/obsidian-help: one folder per language).
Each language's pages are copied with their links replaced by their shown text (`[[A|b]]` -> b,
`[[A]]` -> A, `[t](u)` -> t) and indexed with the local model; what related should find for a page
are its link neighbours in the original (the pages it links to or that link to it). Recall@10 is
the share of a page's neighbours among its first ten related notes, averaged over the pages that
have neighbours, for the vector side alone, the keyword side alone and what ships (both, the
default min_score), against the classic more-like-this: each page's 25 words of highest tf-idf
(tf = count / length, idf = ln(N / df), words of two letters or more, case-folded, df >= 2), the
other pages scored by the sum of their tf-idf over those words. The sides run with min_score 0.

The latency: a real `memsync serve` over bench_query's generated index (10,000 notes of five
chunks, random vectors written straight into the store: embedding them with the local model
takes hours on two cores), `/api/related` asked for a different note each call, and `/api/get` of
the same note in turn: what any request costs on this machine; p50 and p95.
--work keeps the copies and their indexes between runs (the indexing is the slow part).
"""

from __future__ import annotations

import argparse
import http.client
import math
import os
import re
import statistics
import subprocess
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from urllib.parse import unquote, urlencode, urlsplit

from benchmarks.common import MEMSYNC, build, fresh_home, keep_option, p95, workspace
from memsync.embed.local import LocalEmbedder
from memsync.search.options import Options
from memsync.search.related import related
from memsync.store.locate import SqliteLocation

_WIKILINK = re.compile(r"!?\[\[([^\]|#^]*)([#^][^\]|]*)?(?:\|([^\]]*))?\]\]")
_MDLINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)(?:\s+\"[^\"]*\")?\)")
_WORD = re.compile(r"[^\W\d_]{2,}")
TOP = 10


def pages_of(folder: Path) -> dict[str, str]:
    """The language's pages by path inside its folder."""
    return {
        p.relative_to(folder).as_posix(): p.read_text(encoding="utf-8")
        for p in sorted(folder.rglob("*.md"))
    }


def stripped(text: str) -> str:
    """The page with each link replaced by its shown text."""
    text = _WIKILINK.sub(lambda m: m.group(3) or m.group(1), text)
    return _MDLINK.sub(lambda m: m.group(1), text)


def neighbours(pages: Mapping[str, str]) -> dict[str, set[str]]:
    """Each page's link neighbours in the original: the pages it links to, by name as Obsidian
    resolves them (a file name anywhere in the vault), and the pages linking to it."""
    by_name: dict[str, str] = {}
    for path in pages:
        by_name.setdefault(Path(path).stem.lower(), path)
        by_name.setdefault(path[:-3].lower(), path)
    found: dict[str, set[str]] = {path: set() for path in pages}
    for path, text in pages.items():
        targets = [m.group(1) for m in _WIKILINK.finditer(text)]
        targets += [unquote(m.group(2).split("#")[0]) for m in _MDLINK.finditer(text)]
        for target in targets:
            name = target.strip().removesuffix(".md").lower()
            other = by_name.get(name) or by_name.get(name.rsplit("/", 1)[-1])
            if other is not None and other != path:
                found[path].add(other)
                found[other].add(path)
    return found


def more_like_this(texts: Mapping[str, str], terms: int = 25) -> dict[str, list[str]]:
    """The classic baseline: each page's `terms` words of highest tf-idf; the others ranked by
    the sum of their tf-idf over those words."""
    words = {path: _WORD.findall(text.lower()) for path, text in texts.items()}
    df = Counter(w for found in words.values() for w in set(found))
    n = len(texts)
    idf = {w: math.log(n / d) for w, d in df.items() if d >= 2}
    tfidf = {
        path: {w: c / len(found) * idf[w] for w, c in Counter(found).items() if w in idf}
        for path, found in words.items()
        if found
    }
    ranked = {}
    for path, weights in tfidf.items():
        top = sorted(weights, key=lambda w: -weights[w])[:terms]
        scores = {
            other: sum(theirs.get(w, 0.0) for w in top)
            for other, theirs in tfidf.items()
            if other != path
        }
        ranked[path] = [p for p in sorted(scores, key=lambda p: -scores[p]) if scores[p] > 0]
    return ranked


def recall(ranked: Mapping[str, Sequence[str]], truth: Mapping[str, set[str]]) -> float:
    """The mean share of a page's neighbours among its first TOP, over pages that have some."""
    shares = [
        len(set(ranked.get(path, [])[:TOP]) & wanted) / len(wanted)
        for path, wanted in truth.items()
        if wanted
    ]
    return statistics.mean(shares)


def indexed_copy(help_folder: Path, language: str, work: Path, env: dict[str, str]) -> Path:
    """The language's pages without their links, indexed with the local model (once per --work)."""
    vault = work / f"vault-{language}"
    db = work / f"{language}.sqlite"
    if not db.exists():
        for path, text in pages_of(help_folder / language).items():
            target = vault / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(stripped(text), encoding="utf-8")
        subprocess.run(
            [*MEMSYNC, "index", str(vault), "--db", str(db), "--provider", "local"],
            env=env,
            check=True,
            capture_output=True,
        )
    return db


def measured(help_folder: Path, language: str, work: Path, env: dict[str, str]) -> list[float]:
    """(pages with neighbours, recall@10 of the baseline, the vector side, the keyword side, the
    shipped related) for one language."""
    original = pages_of(help_folder / language)
    truth = neighbours(original)
    db = indexed_copy(help_folder, language, work, env)
    baseline = more_like_this({p: stripped(t) for p, t in original.items()})
    figures = [float(sum(1 for wanted in truth.values() if wanted)), recall(baseline, truth)]
    runs = [
        Options(mode="vector", limit=TOP, min_score=0.0),
        Options(mode="keyword", limit=TOP, min_score=0.0),
        Options(limit=TOP),
    ]
    with SqliteLocation(db).open(vectors_in_memory=True) as store:
        for options in runs:
            found = {
                path: [
                    hit.path for hit in related(store, path, stripped(text), None, options).results
                ]
                for path, text in original.items()
            }
            figures.append(recall(found, truth))
    return figures


def cpu_seconds(pid: int) -> float:
    """The CPU time a process has used (Linux: /proc), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def latency(notes: int, runs: int, work: Path) -> dict[str, tuple[float, float, float]]:
    """(p50, p95 ms, the server's mean CPU ms a call) of /api/related through a real `memsync
    serve` on the generated index, and of /api/get of the same note in turn (the floor: what
    any request costs on this machine). On two cores shared with other jobs the wall-clock
    figures vary many times over; the server's CPU time a call varies far less."""
    from benchmarks.bench_http import Served

    home = fresh_home(work / "home")
    env = {**os.environ, "MEMSYNC_HOME": str(home)}
    token = subprocess.run(
        [*MEMSYNC, "token", "add", f"bench-{os.getpid()}"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    db = work / f"related{notes}.sqlite"
    if not db.exists():
        with SqliteLocation(db).open(create=True) as store:
            build(store, notes * 5, LocalEmbedder(), with_text=True)
    served = Served(env, token, ["--db", str(db)], work / "serve.log")
    taken: dict[str, list[float]] = {"/api/related": [], "/api/get": []}
    cpu = dict.fromkeys(taken, 0.0)
    headers = {"Authorization": f"Bearer {token}"}
    host, port = urlsplit(served.url).hostname or "", urlsplit(served.url).port
    try:
        for i in range(runs + 3):
            note = (i * 37) % notes
            for route in taken:
                params = {"location": f"n{note // 100}/note{note}.md"}
                busy, started = cpu_seconds(served.process.pid), time.perf_counter()
                # a connection a request, as curl makes: on one kept alive, every answer of this
                # server took 40 ms more (/api/get 44 ms against curl's 1.7 at load 1.6), a
                # delayed ACK's wait; and the standard library's client, which costs nothing to
                # make (a new httpx client a call added 20 ms)
                connection = http.client.HTTPConnection(host, port, timeout=60)
                connection.request("GET", f"{route}?{urlencode(params)}", headers=headers)
                status = connection.getresponse().status
                connection.close()
                assert status == 200, f"{route} answered {status}"
                if i >= 3:  # the first calls load the vectors and the sample
                    taken[route].append(time.perf_counter() - started)
                    cpu[route] += cpu_seconds(served.process.pid) - busy
    finally:
        served.stop()
    return {
        route: (statistics.median(found) * 1000, p95(found) * 1000, cpu[route] * 1000 / runs)
        for route, found in taken.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("help", type=Path, help="a copy of obsidianmd/obsidian-help")
    parser.add_argument("--tune", default="en", help="the language tuned on")
    parser.add_argument("--held-out", nargs="*", default=["de", "es", "fr", "it", "nl"])
    parser.add_argument("--work", type=Path, help="keep copies and indexes here between runs")
    parser.add_argument("--latency-notes", type=int, default=10_000, help="0: no latency run")
    parser.add_argument("--runs", type=int, default=100)
    keep_option(parser)
    args = parser.parse_args()
    with workspace("memsync-related-", args.keep) as scratch:
        work = args.work or scratch
        work.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MEMSYNC_HOME": str(fresh_home(work / "home"))}
        print("| language | pages with links | more-like-this | vector side | keyword side "
              "| shipped |")  # fmt: skip
        print("|---|---|---|---|---|---|")
        for language in [args.tune, *args.held_out]:
            pages, *recalls = measured(args.help, language, work, env)
            row = " | ".join(f"{r:.3f}" for r in recalls)
            role = " (tuned)" if language == args.tune else " (held out)"
            print(f"| {language}{role} | {pages:.0f} | {row} |", flush=True)
        if args.latency_notes:
            timings = latency(args.latency_notes, args.runs, work)
            print()
            print(
                "| through serve, in turn | p50 (ms) | p95 (ms) | server CPU a call (ms) | load |"
            )
            print("|---|---|---|---|---|")
            for route, (p50, slow, busy) in timings.items():
                print(
                    f"| {route}, {args.latency_notes:,} notes ({args.latency_notes * 5:,} "
                    f"chunks), {args.runs} calls | {p50:.1f} | {slow:.1f} | {busy:.1f} "
                    f"| {os.getloadavg()[0]:.1f} |"
                )


if __name__ == "__main__":
    main()
