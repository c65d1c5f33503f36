"""Quick capture into the daily log, on real files, a real index and real second processes."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from marchdb.cli.main import app
from marchdb.errors import Conflict, FileError, InvalidInput
from marchdb.index import db
from marchdb.lifecycle.capture import DESCRIPTION_CHARS, MAX_TITLE_CHARS, describe
from marchdb.store import Store
from marchdb.vault import notes

DAY = dt.datetime(2026, 11, 3, 9, 15, tzinfo=dt.UTC).astimezone()  # local, like the log itself


def at(hour: int, minute: int = 0) -> dt.datetime:
    return DAY.replace(hour=hour, minute=minute)


def chunks(store, mem_id: str) -> list[str]:
    return [
        r[0]
        for r in store.con.execute(
            "SELECT c.text FROM chunks c JOIN memory_index m ON m.rid = c.mem_rid WHERE m.id = ? ORDER BY c.seq",
            (mem_id,),
        )
    ]


def test_first_entry_creates_the_day_then_entries_append(vault, store):
    first = store.log("Finished the code review", "Three problems in PR #42.", embed=False, now=at(9, 5))
    assert first["status"] == "created" and first["id"] == "log_2026-11-03"
    assert first["path"].endswith("2026/11/week1/2026-11-03-daily-log.md")
    second = store.log("Deploy fixed", embed=False, now=at(14, 30))
    assert (
        second["status"] == "appended"
        and second["path"] == first["path"]
        and second["entry"] == "### 14:30 - Deploy fixed"
    )
    text = (vault.root / "2026/11/week1/2026-11-03-daily-log.md").read_text()
    note = notes.parse_note(text.encode())
    assert (note.id, note.name, note.tags, note.status) == (
        "log_2026-11-03",
        "Daily log 2026-11-03",
        ["daily-log"],
        "active",
    )
    assert note.description == "Finished the code review; Deploy fixed"
    assert (
        note.body.strip()
        == "### 09:05 - Finished the code review\n\nThree problems in PR #42.\n\n### 14:30 - Deploy fixed"
    )
    assert note.created_at < note.updated_at
    # Each entry is its own chunk, so recall scores them one by one.
    assert chunks(store, "log_2026-11-03") == [
        "### 09:05 - Finished the code review\n\nThree problems in PR #42.",
        "### 14:30 - Deploy fixed",
    ]
    row = db.rows(store.con, "SELECT description, status FROM memory_index WHERE id = 'log_2026-11-03'")[0]
    assert row == {"description": note.description, "status": "active"}
    # Another day, another log.
    assert store.log("Next day", embed=False, now=at(8) + dt.timedelta(days=1))["id"] == "log_2026-11-04"


def test_text_that_reads_as_an_entry_heading_makes_no_entry_of_its_own(vault, store):
    store.log("real", "before\n### 10:00 - injected entry\nafter", embed=False, now=at(9))
    text = (vault.root / "2026/11/week1/2026-11-03-daily-log.md").read_text()
    assert "\n\\### 10:00 - injected entry\n" in text  # escaped: shown as typed in any Markdown viewer
    row = store.con.execute("SELECT description FROM memory_index WHERE id = 'log_2026-11-03'").fetchone()
    assert row[0] == "real" and len(chunks(store, "log_2026-11-03")) == 1


def test_text_with_carriage_returns_keeps_the_day_open_to_entries(vault, store):
    # A lone CR (a progress bar piped in, old Mac line ends) went into the file
    # as it was: every later entry of the day was refused ("cannot append in
    # place: a line ends with a lone carriage return") until the file was fixed by hand.
    store.log("progress", "downloading 10%\rdownloading 100%\r### 10:00 - injected entry\rdone", embed=False, now=at(9))
    store.log("windows", "line one\r\nline two", embed=False, now=at(10))
    assert store.log("later", embed=False, now=at(11))["status"] == "appended"
    data = (vault.root / "2026/11/week1/2026-11-03-daily-log.md").read_bytes()
    assert b"\r" not in data and b"\n\\### 10:00 - injected entry\n" in data
    row = store.con.execute("SELECT description FROM memory_index WHERE id = 'log_2026-11-03'").fetchone()
    assert row[0] == "progress; windows; later"
    made = store.remember("Builds run on ARM now\rthe x86 runners are gone", embed=False)
    assert b"\r" not in Path(made["path"]).read_bytes()
    assert store.save(id=made["id"], description="Builds run on ARM", embed=False)["status"] == "updated"


def test_the_description_says_what_the_day_holds_within_its_bound():
    titles = [f"entry number {i} with some words" for i in range(40)]
    text = describe(dt.date(2026, 11, 3), titles)
    assert len(text) <= DESCRIPTION_CHARS and text.startswith("entry number 0 with some words; entry number 1")
    shown = text.count("entry number")
    assert text.endswith(f"(+{40 - shown} more)")
    assert describe(dt.date(2026, 11, 3), []) == "Daily log 2026-11-03"
    huge = describe(dt.date(2026, 11, 3), ["x" * 500, "y"])
    assert len(huge) <= DESCRIPTION_CHARS and huge.endswith("(+1 more)")


APPENDER = textwrap.dedent(
    """
    import datetime as dt, sys
    from marchdb.config import load_config
    from marchdb.store import Store
    home, root, worker, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    now = dt.datetime(2026, 11, 3, 12, 0, tzinfo=dt.UTC)
    with Store(load_config(home=home, root=root, env={})) as store:
        for i in range(count):
            store.log(f"worker {worker} entry {i}", f"text of worker {worker} entry {i}\\n" + "line\\n" * 20, embed=False, now=now)
    """
)


def test_appends_from_several_processes_lose_nothing_and_never_interleave(tmp_path, vault, cfg):
    workers, count = 4, 12
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", APPENDER, str(cfg.home), str(vault.root), str(w), str(count)],
            stderr=subprocess.PIPE,
        )
        for w in range(workers)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err.decode()
    files = list(vault.root.rglob("*-daily-log*.md"))
    assert len(files) == 1, files
    note = notes.parse_note(files[0].read_bytes())
    body = note.body
    entries = [e for e in re.split(r"(?m)^(?=### )", body.strip()) if e]
    assert len(entries) == workers * count
    expected = "line\n" * 20
    for entry in entries:
        head, _, rest = entry.partition("\n\n")
        worker, i = re.fullmatch(r"### \d\d:\d\d - worker (\d) entry (\d+)", head).groups()
        assert rest.strip("\n") == f"text of worker {worker} entry {i}\n{expected}".strip("\n")
    assert {e.split("\n")[0][12:] for e in entries} == {
        f"worker {w} entry {i}" for w in range(workers) for i in range(count)
    }
    with Store(cfg) as store:
        store.sync(embed=False)
        assert len(chunks(store, note.id)) == workers * count


def test_an_edit_by_a_person_is_kept_and_a_moved_log_is_found(vault, store):
    store.log("first", embed=False, now=at(9))
    path = vault.root / "2026/11/week1/2026-11-03-daily-log.md"
    text = path.read_text().replace("status: active\n", "status: active\n# my comment\n")
    path.write_text(text + "\nA line I added by hand.\n")
    moved = vault.root / "journal" / "today.md"
    moved.parent.mkdir()
    path.rename(moved)
    res = store.log("second", "more", embed=False, now=at(10))
    assert res["status"] == "appended" and res["path"] == str(moved)
    assert not path.exists()
    text = moved.read_text()
    assert "# my comment\n" in text and "A line I added by hand." in text
    assert text.index("A line I added by hand.") < text.index("### 10:00 - second")
    assert "description: first; second" in text


def test_bad_input_and_conflicts_write_nothing(vault, store):
    for title, text, words in [
        ("", None, "give the entry a title"),
        ("   ", "x", "give the entry a title"),
        (None, "x", "memory_log needs title"),
        ("a\x00b", None, "NUL"),
        ("x" * (MAX_TITLE_CHARS + 1), None, "the limit is 200"),
        ("ok", "y" * (64 * 1024 + 1), "save long material"),
        ("ok", 5, "text must be text"),
        ("\x1b\x07\x08", None, "only control characters"),
    ]:
        with pytest.raises(InvalidInput, match=words):
            store.log(title, text, embed=False, now=at(9))
    assert not list(vault.root.rglob("*.md"))
    vault.memory("a.md", "log_2026-11-03")
    vault.memory("b.md", "log_2026-11-03")
    with pytest.raises(Conflict, match="2 files hold id log_2026-11-03"):
        store.log("x", embed=False, now=at(9))
    (vault.root / "b.md").unlink()  # as the message asks: the next entry goes in, no sync needed
    assert store.log("x", embed=False, now=at(9))["status"] == "appended"


def test_a_log_whose_frontmatter_cannot_be_edited_in_place_is_never_rewritten(vault, store):
    store.log("first", embed=False, now=at(9))
    path = vault.root / "2026/11/week1/2026-11-03-daily-log.md"
    text = path.read_text()
    stamp = re.search(r"^updated_at: .*$", text, re.M).group(0)
    edited = text.replace("status: active\n", "status: active  # my note\nmood: good  # keep\n")
    edited = edited.replace(stamp + "\n", f"{stamp}\n{stamp}\n")  # a field twice: no safe place to edit
    path.write_text(edited)
    with pytest.raises(FileError, match="cannot append to .* in place: .*nothing was written"):
        store.log("second", embed=False, now=at(10))
    assert path.read_text() == edited  # comments, order and the duplicate as the person left them


@pytest.mark.parametrize("broken", ["yaml", "symlink"])
def test_a_day_log_that_cannot_be_read_gets_no_twin(vault, store, tmp_path, broken):
    # A second file with the day's id once made every later entry fail on the conflict.
    store.log("first", embed=False, now=at(9))
    path = vault.root / "2026/11/week1/2026-11-03-daily-log.md"
    if broken == "yaml":
        path.write_text(path.read_text().replace("name: ", "name: [broken ", 1))
    else:
        target = tmp_path / "elsewhere.md"
        path.rename(target)
        path.symlink_to(target)
    before = sorted(p.name for p in vault.root.rglob("*"))
    with pytest.raises(Conflict, match="id log_2026-11-03 is held by a file marchdb cannot read .* then log again"):
        store.log("second", embed=False, now=at(10))
    assert sorted(p.name for p in vault.root.rglob("*")) == before


def test_an_archived_log_still_takes_entries_and_says_so(vault, store):
    store.log("first", embed=False, now=at(9))
    res = store.log("second", embed=False, now=at(9))
    store.save(id=res["id"], status="archived", embed=False)
    res = store.log("third", embed=False, now=at(9))
    assert res["status"] == "appended" and "status archived" in res["warnings"][0]


def test_save_without_description_points_to_quick_capture(store):
    with pytest.raises(InvalidInput, match=r"marchdb log .*memory_log"):
        store.save(name="hurried", body="just a thought", embed=False)


def test_cli_log_with_text_stdin_and_json(tmp_path, vault):
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    out = runner.invoke(app, [*base, "log", "Deploy fixed", "the gateway timeout is 30 s now"], env=env)
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("created: log_") and re.search(r"### \d\d:\d\d - Deploy fixed", out.stdout)
    piped = runner.invoke(app, [*base, "log", "From a pipe", "--json"], input="details from stdin\n", env=env)
    data = json.loads(piped.stdout)
    assert data["status"] == "appended" and set(data) == {"status", "id", "path", "entry", "message", "warnings"}
    assert "details from stdin" in open(data["path"], encoding="utf-8").read()
    bad = runner.invoke(app, [*base, "log", " "], env=env)
    assert bad.exit_code == 2 and "give the entry a title" in bad.stderr


def test_logged_entries_are_recalled_through_the_day(vault, model_store):
    model_store.log("Dentist appointment", "Moved the dentist to Thursday 3 pm.", now=at(9))
    model_store.log(
        "Gateway timeout", "Raised the bf-gateway timeout to 30 seconds after the deploy failed.", now=at(11)
    )
    hints = model_store.recall("what did we change about the gateway timeout?").hints
    assert hints and hints[0].id == "log_2026-11-03"


def test_cli_log_never_waits_on_a_stdin_that_stays_open(tmp_path, vault, monkeypatch, capsys):
    # An agent's shell may hand the command a pipe nobody writes to or closes:
    # silent for STDIN_WAIT_SECONDS, it counts as no text (and says so).
    import os

    from marchdb.cli.app import stdin_has_input

    read, write = os.pipe()
    with os.fdopen(read, "r") as silent:
        monkeypatch.setattr(sys, "stdin", silent)
        assert stdin_has_input(wait=0.2) is False
        assert "nothing came on stdin" in capsys.readouterr().err
        os.write(write, b"text\n")
        assert stdin_has_input(wait=0.2) is True
    os.close(write)
    monkeypatch.setattr(sys, "stdin", None)  # `marchdb log t <&-`
    assert stdin_has_input(wait=0.2) is False


def test_cli_log_with_a_closed_or_waited_for_stdin(tmp_path, vault):
    import os
    from pathlib import Path

    marchdb = str(Path(sys.executable).with_name("marchdb"))
    env = {**os.environ, "MARCH_HOME": str(tmp_path / "home"), "MARCH_MEMORY_ROOT": str(vault.root)}
    env.update(MARCH_DAEMON="0", MARCH_EMBED_MODEL=str(tmp_path / "none.gguf"))
    closed = subprocess.run(
        ["sh", "-c", f'"{marchdb}" log "Only a title" <&-'], capture_output=True, text=True, env=env, timeout=60
    )
    assert closed.returncode == 0 and "bug" not in closed.stderr, closed.stderr
    # '-' says "wait for it": piped text arrives whole.
    done = subprocess.run(
        [marchdb, "log", "With text", "-"], input="details here\n", capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0
    (day,) = vault.root.rglob("*daily-log.md")
    text = day.read_text(encoding="utf-8")
    assert "Only a title" in text and "details here" in text


# ---------------------------------------------------------------- one-liners (remember)


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Release freeze on Fridays: no production deploys after Thursday noon.", "Release freeze on Fridays"),
        ("Deploys are on Tuesdays. Never on a Friday.", "Deploys are on Tuesdays"),
        (
            "The user prefers 4 spaces, never tabs, in Python code",
            "The user prefers 4 spaces, never tabs, in Python code",
        ),
        ("数据库密码每月轮换一次，用运维脚本。", "数据库密码每月轮换一次"),
        ("Staging - the cluster in eu-west-1", "Staging"),
        (
            "Our staging cluster lives in eu-west-1 and its kubeconfig is kept in the team vault",
            "Our staging cluster lives in eu-west-1 and its kubeconfig…",
        ),
    ],
)
def test_a_one_liners_name_is_its_subject_or_first_words(text, name):
    from marchdb.lifecycle.capture import NAME_CHARS, one_liner

    made, description, body = one_liner(f"  {text}\n")
    assert made == name and len(made) <= NAME_CHARS + 1
    assert description == text and body == text


def test_remember_makes_a_memory_from_one_sentence_with_saves_checks(vault, store):
    text = "Release freeze on Fridays: no production deploys after Thursday noon."
    done = store.remember(text, tags=["release"], embed=False)
    assert done["status"] == "created" and (done["name"], done["description"]) == ("Release freeze on Fridays", text)
    note = notes.parse_note(open(done["path"], "rb").read())
    assert (note.name, note.description, note.tags, note.body.strip()) == (done["name"], text, ["release"], text)
    plain = store.remember("Biscuit takes carprofen with breakfast.", embed=False)
    assert notes.parse_note(open(plain["path"], "rb").read()).tags == ["note"]  # save needs a tag
    # Save's checks: the same name again is a near-duplicate, nothing written; force writes it.
    twin = store.remember(text, embed=False)
    assert twin["status"] == "duplicate" and twin["id"] == done["id"]
    assert store.remember(text, force=True, embed=False)["status"] == "created"
    # And its answer: what is related to a new one.
    for i in range(50):
        vault.memory(f"g{i}.md", f"mem_g{i}", name=f"Garden note {i}", description=f"tomatoes and basil, bed {i}")
    store.sync(embed=False)
    allowed = store.remember("The release freeze on Fridays is lifted: production deploys are fine.", embed=False)
    assert done["id"] in [r["id"] for r in allowed["related"]]
    for bad, words in (("", "give the sentence"), ("x" * 1001, "at most 1,000"), ("\ud800", "not valid Unicode")):
        with pytest.raises(InvalidInput, match=words):
            store.remember(bad, embed=False)
    with pytest.raises(InvalidInput, match="invalid tags"):
        store.remember("A fine sentence.", tags=["a*b"], embed=False)


def test_remember_from_the_cli(tmp_path, vault):
    runner = CliRunner()
    base = ["--home", str(tmp_path / "home"), "--root", str(vault.root)]
    env = {"MARCH_EMBED_MODEL": str(tmp_path / "none.gguf")}
    text = "Release freeze on Fridays: no production deploys after Thursday noon."
    done = runner.invoke(app, [*base, "remember", text, "-t", "release", "-t", "process"], env=env)
    assert done.exit_code == 0 and done.stdout.startswith("name: Release freeze on Fridays\ncreated: mem_")
    again = runner.invoke(app, [*base, "remember", text, "--json"], env=env)
    data = json.loads(again.stdout)
    assert again.exit_code == 9 and data["status"] == "duplicate" and data["name"] == "Release freeze on Fridays"
    empty = runner.invoke(app, [*base, "remember", " "], env=env)
    assert empty.exit_code == 2 and "give the sentence" in empty.stderr


def test_remember_reads_the_sentence_from_stdin_for_a_dash(tmp_path, vault):
    # `echo text | marchdb remember -` saved a memory named "-" and dropped the text.
    from pathlib import Path

    env = {
        **os.environ,
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"),
    }
    exe = str(Path(sys.executable).with_name("marchdb"))
    sentence = "The staging database moved to port 5433 on Monday."
    done = subprocess.run(
        [exe, "remember", "-", "--json"], input=sentence + "\n", capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["description"] == sentence and data["name"] != "-"
    empty = subprocess.run([exe, "remember", "-"], input="  \n", capture_output=True, text=True, env=env, timeout=60)
    assert empty.returncode == 2 and "give the sentence" in empty.stderr
