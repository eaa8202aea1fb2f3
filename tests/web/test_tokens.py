"""The token file and `memsync token add/list/revoke`."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner

from memsync.cli.commands import main
from memsync.config import data_dir
from memsync.errors import ArgumentError, StoreError, UnsafeFile
from memsync.web.tokens import TOKEN_FILE, Tokens

NOBODY = 65534


def test_a_token_is_kept_hashed_in_a_file_only_this_user_reads(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path / "t" / TOKEN_FILE)
    secret = tokens.add("laptop")
    text = tokens.path.read_text()
    assert secret not in text and "laptop" in text
    assert stat.S_IMODE(tokens.path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tokens.path.parent.iterdir()) == ["tokens.json", "tokens.lock"]
    found = tokens.verify(secret)
    assert found is not None and found.name == "laptop" and not found.writes
    assert tokens.verify(secret + "x") is None and tokens.verify("") is None


def test_a_revoked_token_is_refused_by_a_reader_that_read_the_file_before(tmp_path: Path) -> None:
    path = tmp_path / TOKEN_FILE
    server, cli = Tokens(path), Tokens(path)
    secret = server.add("agent", write=True)
    token = server.verify(secret)
    assert token is not None and token.writes and server.still(token)
    cli.revoke("agent")
    assert server.verify(secret) is None and not server.still(token)
    again = cli.add("agent")  # the same name made again is another token
    assert server.verify(again) is not None and not server.still(token)


def test_names_are_checked_and_unique(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path / TOKEN_FILE)
    tokens.add("a")
    with pytest.raises(ArgumentError, match="exists"):
        tokens.add("a")
    for bad in ("", "-x", "a b", "x" * 65, "é"):
        with pytest.raises(ArgumentError, match="name"):
            tokens.add(bad)
    with pytest.raises(ArgumentError, match="no token named b"):
        tokens.revoke("b")


def test_last_use_is_noted_at_most_once_a_minute(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path / TOKEN_FILE)
    secret = tokens.add("a")
    first = tokens.verify(secret)
    assert first is not None and first.last_used is None
    tokens.touch(first)
    used = tokens.verify(secret)
    assert used is not None and used.last_used is not None
    before = tokens.path.stat().st_mtime_ns
    tokens.touch(used)
    assert tokens.path.stat().st_mtime_ns == before


def test_a_spoiled_token_file_is_one_error_saying_what_to_do(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path / TOKEN_FILE)
    tokens.path.write_text("{not json")
    with pytest.raises(StoreError, match="remove it and add the tokens again"):
        tokens.all()


@pytest.mark.parametrize(
    "fields",
    [
        {"kind": "read", "sha256": 5, "created": "yesterday"},
        {"kind": "admin", "sha256": "ab", "created": 1.0},
        {"kind": "read", "sha256": ["ab"], "created": 1.0},
        {"kind": "read", "sha256": "ab", "created": 1.0, "last_used": "now"},
    ],
)
def test_a_token_file_with_fields_of_the_wrong_kind_is_one_error(
    tmp_path: Path, fields: dict[str, object]
) -> None:
    """Hand-edited, its fields of the wrong type would fail later, in a sort or a sum, as a
    trace (`token list`) or a 500 (serve)."""
    Tokens().add("a")
    Tokens().path.write_text(json.dumps({"tokens": {"x": fields}}))
    done = CliRunner().invoke(main, ["token", "list"])
    assert done.exit_code == 1
    assert done.output.startswith(f"memsync: error: cannot read the token file {Tokens().path}")
    assert done.output.count("\n") == 1


def test_a_folder_in_the_token_files_place_is_one_line_saying_so(tmp_path: Path) -> None:
    tokens = Tokens(tmp_path / TOKEN_FILE)
    tokens.path.mkdir()
    with pytest.raises(UnsafeFile, match=f"the token file {tokens.path} is not a file: remove"):
        tokens.all()


def test_token_commands_print_the_token_once_and_never_list_it() -> None:
    runner = CliRunner()
    added = runner.invoke(main, ["token", "add", "laptop"])
    assert added.exit_code == 0, added.output
    secret = added.output.strip()
    assert secret.startswith("memsync_") and "\n" not in secret
    as_json = runner.invoke(main, ["token", "add", "agent", "--write", "--json"])
    assert json.loads(as_json.output)["token"].startswith("memsync_")
    listed = runner.invoke(main, ["token", "list"])
    assert "laptop" in listed.output and "agent" in listed.output and "write" in listed.output
    assert "never" in listed.output and secret not in listed.output
    data = json.loads(runner.invoke(main, ["token", "list", "--json"]).output)
    assert [t["name"] for t in data["tokens"]] == ["laptop", "agent"]
    assert set(data["tokens"][0]) == {"name", "kind", "created", "last_used"}
    assert (data_dir() / TOKEN_FILE).is_file()
    revoked = runner.invoke(main, ["token", "revoke", "laptop"])
    assert revoked.exit_code == 0 and "laptop" not in runner.invoke(main, ["token", "list"]).output
    again = runner.invoke(main, ["token", "revoke", "laptop"])
    assert again.exit_code == 1 and again.output.startswith("memsync: error: no token named")
    taken = runner.invoke(main, ["token", "add", "agent"])
    assert taken.exit_code == 1 and "exists" in taken.output
    runner.invoke(main, ["token", "revoke", "agent"])
    assert "no tokens" in runner.invoke(main, ["token", "list"]).output


def _group_writable_file(path: Path) -> None:
    path.chmod(0o620)


def _other_writable_file(path: Path) -> None:
    path.chmod(0o602)


def _writable_folder(path: Path) -> None:
    path.parent.chmod(0o777)


def _linked_file(path: Path) -> None:
    elsewhere = path.parent.parent / "elsewhere.json"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)


def _linked_folder(path: Path) -> None:
    real = path.parent.parent / "real"
    path.parent.rename(real)
    path.parent.symlink_to(real)


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (
            _group_writable_file,
            "the token file {file} can be written by other users, who could "
            "add tokens of their own: chmod go-w {file}",
        ),
        (_other_writable_file, "the token file {file} can be written by other users"),
        (
            _writable_folder,
            "the token file's folder {folder} can be written by other users, who "
            "could add tokens of their own: chmod go-w {folder}",
        ),
        (
            _linked_file,
            "the token file {file} is a symbolic link, and memsync follows none "
            "there: put the file itself in its place",
        ),
        (_linked_folder, "the token file's folder {folder} is a symbolic link"),
    ],
)
def test_a_token_file_others_could_have_written_is_refused_saying_how_to_fix_it(
    tmp_path: Path, spoil: Callable[[Path], None], why: str
) -> None:
    tokens = Tokens(tmp_path / "home" / TOKEN_FILE)
    secret = tokens.add("laptop", write=True)
    spoil(tokens.path)
    message = why.format(file=tokens.path, folder=tokens.path.parent)
    for use in (tokens.all, lambda: tokens.verify(secret), lambda: tokens.add("other")):
        with pytest.raises(UnsafeFile) as refused:
            use()
        assert str(refused.value).startswith(message)


def test_a_token_file_another_user_owns_is_refused(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("giving a file to another user (nobody) needs root")
    tokens = Tokens(tmp_path / "home" / TOKEN_FILE)
    tokens.add("laptop")
    os.chown(tokens.path, NOBODY, -1)
    with pytest.raises(UnsafeFile, match=f"belongs to another user \\(uid {NOBODY}\\)"):
        tokens.all()
    os.chown(tokens.path, 0, -1)
    os.chown(tokens.path.parent, NOBODY, -1)
    with pytest.raises(UnsafeFile, match="the token file's folder .* belongs to another user"):
        tokens.all()


def test_token_add_never_writes_through_a_link_and_says_so_in_one_line(tmp_path: Path) -> None:
    """Another user's file behind a link in the token file's place stays as it was."""
    Tokens().add("laptop")
    path = Tokens().path
    victim = tmp_path / "theirs.json"
    victim.write_text('{"tokens": {}}')
    path.unlink()
    path.symlink_to(victim)
    for args in (["token", "add", "mine", "--write"], ["token", "list"], ["token", "revoke", "x"]):
        done = CliRunner().invoke(main, args)
        assert done.exit_code == 1
        assert done.output == (
            f"memsync: error: the token file {path} is a symbolic link, and memsync follows "
            "none there: put the file itself in its place\n"
        )
    assert victim.read_text() == '{"tokens": {}}' and path.is_symlink()


def test_folders_memsync_makes_are_private_whatever_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under a umask of 002 (many desktops) the data folder an index made first would be
    group-writable, and the token file in it refused: every folder memsync makes is 0700."""
    monkeypatch.setenv("MEMSYNC_HOME", str(tmp_path / "new" / "memsync"))
    vault = tmp_path / "vault"
    vault.mkdir()
    (vault / "note.md").write_text("# A note\n\nsome words\n", encoding="utf-8")
    before = os.umask(0o002)
    try:
        runner = CliRunner()
        indexed = runner.invoke(main, ["index", str(vault), "--provider", "none"])
        added = runner.invoke(main, ["token", "add", "agent"])
    finally:
        os.umask(before)
    assert indexed.exit_code == 0, indexed.output
    assert added.exit_code == 0, added.output
    home = data_dir()
    for folder in (home.parent, home, home / "vaults"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
