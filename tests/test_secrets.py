"""Secrets never stored, never recalled; ``<private>`` regions never indexed.

Every write path (save, remember, log, now, each import kind, the MCP tools,
Hermes' provider through ``marchdb call``) is run with fabricated secrets,
then every file marchdb wrote (the vault, the home: index, logs, working
page) is read back as bytes: the secret is in none of them, and the
answer says what was kept out. A file the user wrote by hand keeps its
secret (marchdb never rewrites it), while the index, hints, search and the
injected context carry markers, and ``doctor`` points at it.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_transcripts import SESSION, cc_lines, conversation, write_jsonl

from marchdb import redact
from marchdb.index import db
from marchdb.store import Store

MARCHDB = str(Path(sys.executable).with_name("marchdb"))
_RNG = random.Random(7)
_ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _token(n: int) -> str:
    while True:
        value = "".join(_RNG.choice(_ALNUM) for _ in range(n))
        if redact.random_like(value, 12):
            return value


#: Made up here, in the providers' formats.
GITHUB = "ghp_" + _token(36)
OPENAI = "sk-proj-" + _token(64)
AWS = "AKIA" + "".join(_RNG.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567") for _ in range(16))
PASSWORD = "Tr0ub4dor&3x"
SECRETS = (GITHUB, OPENAI, AWS, PASSWORD)


def files_holding(secret: str, *folders: Path, skip: tuple[Path, ...] = ()) -> list[str]:
    """Every regular file under ``folders`` whose bytes hold ``secret`` (the
    index, its WAL, logs, memories, the working page...), but ``skip``."""
    needle = secret.encode()
    found = []
    for folder in folders:
        for dirpath, _dirs, names in os.walk(folder):
            for name in names:
                path = Path(dirpath) / name
                if path in skip or path.is_symlink() or not path.is_file():
                    continue
                if needle in path.read_bytes():
                    found.append(str(path))
    return found


def nowhere(store: Store, *secrets: str, skip: tuple[Path, ...] = ()) -> None:
    store.close()  # the index's WAL folded in: its pages are read too
    for secret in secrets or SECRETS:
        assert files_holding(secret, store.cfg.memory_root, store.cfg.home, skip=skip) == [], secret


# ---------------------------------------------------------------- the store's write paths


def test_save_keeps_secrets_out_of_the_file_the_index_and_the_answer(store, vault):
    out = store.save(
        name="Deploy credentials",
        description=f"CI pushes with {GITHUB}",
        body=f"export OPENAI_API_KEY={OPENAI}\naws_access_key_id = {AWS}\npassword: {PASSWORD}\n",
        tags=["deploy"],
    )
    assert out["status"] == "created"
    assert "secrets were kept out" in out["warnings"][0]
    assert "the description held 1 github token" in out["warnings"][0]
    text = Path(out["path"]).read_text()
    assert "CI pushes with [redacted: github token]" in text
    assert "OPENAI_API_KEY=[redacted: openai key]" in text and "[redacted: aws access key]" in text
    assert "password: [redacted: password]" in text
    hint = store.recall("deploy credentials CI pushes").to_dict()
    assert all(GITHUB not in json.dumps(h) for h in hint["hints"])
    # an update is redacted too, and keeps the fields it was not given
    again = store.save(id=out["id"], body=f"rotated: {GITHUB}")
    assert "[redacted: github token]" in Path(again["path"]).read_text()
    nowhere(store)


def test_a_tag_that_looks_like_a_secret_is_refused(store):
    from marchdb.errors import InvalidInput

    with pytest.raises(InvalidInput, match="tag looks like a secret"):
        store.save(name="n", description="d", body="b", tags=["deploy", GITHUB.lower()])


def test_remember_log_and_now_keep_secrets_out(store):
    said = store.remember(f"The staging database password is {PASSWORD} until Friday.")
    assert PASSWORD not in said["description"] and "[redacted: password]" in said["description"]
    assert "secrets were kept out" in said["warnings"][0]
    logged = store.log(f"Rotated {GITHUB}", f"new key {OPENAI}")
    assert "the title held 1 github token" in logged["warnings"][0]
    page = store.now(f"Migrating; the AWS key is {AWS}")
    assert page["text"] == "Migrating; the AWS key is [redacted: aws access key]"
    assert page["warnings"] and "[now]" in page["block"] and AWS not in page["block"]
    nowhere(store)


def test_logs_never_hold_a_secret_a_message_quotes(tmp_path):
    from marchdb import logfile

    logfile.log(tmp_path, "hooks", f"claude-code: the event is not JSON near {GITHUB}")
    logfile.append(logfile.logs_dir(tmp_path) / logfile.LIFECYCLE, {"op": "import", "path": f"/x/{OPENAI}"})
    assert files_holding(GITHUB, tmp_path) == [] and files_holding(OPENAI, tmp_path) == []
    assert "[redacted: github token]" in (tmp_path / "logs" / "hooks.log").read_text()


# ---------------------------------------------------------------- imports


def test_every_import_kind_keeps_secrets_out(store, tmp_path):
    notes = tmp_path / "notes"
    (notes / "Projects").mkdir(parents=True)
    (notes / "Projects" / "Deploy.md").write_text(
        f"---\ntags: [deploy]\napi_token: {OPENAI}\n---\n# Deploy\n\nPush with {GITHUB} from CI.\n"
    )
    typed = tmp_path / "typed"
    (typed / "feedback").mkdir(parents=True)
    (typed / "feedback" / "ci.md").write_text(f"CI reads DB_PASSWORD={PASSWORD} from the runner.\n")
    workspace = tmp_path / "ws"
    (workspace / "memory").mkdir(parents=True)
    (workspace / "NOW.md").write_text(f"Rotating keys; old one {AWS}\n")
    (workspace / "memory" / "2026-03-02.md").write_text(f"# 2026-03-02\n\n## 10:00 - Keys\n\npassword = {PASSWORD}\n")
    lines = cc_lines()
    for line in lines:
        if (
            line.get("type") == "user"
            and isinstance(line["message"].get("content"), str)
            and "<" not in line["message"]["content"]
        ):
            line["message"]["content"] += f" (my token is {GITHUB})"
    cc = write_jsonl(tmp_path / "claude" / "projects" / "-tmp-x" / f"{SESSION}.jsonl", lines)
    conv = conversation()
    conv["mapping"]["u1"]["message"]["content"]["parts"] = [f"the deploy failed; key {OPENAI} was used"]
    export = tmp_path / "export"
    export.mkdir()
    (export / "conversations.json").write_text(json.dumps([conv]))

    for kind, source in (
        ("obsidian", notes),
        ("typed", typed),
        ("workspace", workspace),
        ("claude-code", cc.parent.parent),
        ("chatgpt", export),
    ):
        plan = store.import_(kind, source)  # the dry run says it too
        warned = [w for item in plan["items"] for w in item["warnings"] if "secrets kept out" in w]
        assert warned, kind
        done = store.import_(kind, source, apply=True, embed=False)
        assert done["created"] >= 1, (kind, done)
    texts = "".join(p.read_text() for p in store.cfg.memory_root.rglob("*.md"))
    assert "[redacted: github token]" in texts and "[redacted: openai key]" in texts
    assert store.now()["text"] == "Rotating keys; old one [redacted: aws access key]"
    nowhere(store)
    # a second import finds every item imported already: the redacted memory is the item
    store2 = Store(store.cfg)
    assert store2.import_("obsidian", notes)["created"] == 0
    store2.close()


def test_a_session_id_that_holds_a_secret_is_no_source_key_in_the_vault(store, tmp_path):
    # The session id comes from the file (Claude Code's sessionId, Codex's
    # session_meta): the source key made of it is written into the memory's
    # frontmatter and the index, so a secret there must become a marker too.
    from hostchats import DATA

    codex = tmp_path / "codex"
    shutil.copytree(DATA / "codex", codex)
    rollout = next(codex.rglob("rollout-*.jsonl"))
    records = [json.loads(line) for line in rollout.read_text().splitlines()]
    for record in records:
        if record["type"] == "session_meta":
            record["payload"]["id"] = record["payload"]["session_id"] = GITHUB
    rollout.write_text("".join(json.dumps(r) + "\n" for r in records))
    cc = write_jsonl(tmp_path / "claude" / "-tmp-x" / f"{AWS}.jsonl", cc_lines(session=AWS))

    for kind, source in (("codex", codex), ("claude-code", cc.parent.parent)):
        done = store.import_(kind, source, apply=True, embed=False)
        assert done["created"] == 1, (kind, done)
        assert any("source key" in w for w in done["items"][0]["warnings"]), done["items"][0]
    nowhere(store, GITHUB, AWS)
    # the key stays the same from one import to the next: nothing twice
    again = Store(store.cfg)
    assert again.import_("codex", codex)["created"] == 0
    assert again.import_("claude-code", cc.parent.parent)["created"] == 0
    again.close()


# ---------------------------------------------------------------- files the user wrote


def test_a_hand_written_secret_stays_in_its_file_and_out_of_everything_else(store, vault, cfg):
    path = vault.memory(
        "keys.md",
        "mem_keys",
        name="Deploy keys",
        description=f"CI token {GITHUB}",
        tags=["deploy"],
        body=f"The bot uses {OPENAI}.\n\nOther notes about deploys on Friday.\n",
    )
    before = path.read_bytes()
    store.sync(embed=False)
    assert path.read_bytes() == before  # never rewritten
    row = db.rows(store.con, "SELECT name, description FROM memory_index WHERE id = 'mem_keys'")[0]
    assert row["description"] == "CI token [redacted: github token]"
    problems = [p for p in store.doctor()["problems"] if p["kind"] == "secret"]
    assert problems[0]["path"] == "keys.md"
    assert "the description held 1 github token" in problems[0]["detail"]
    assert "never rewrites" in problems[0]["advice"]
    hits = store.search("bot")["results"]
    assert hits and all(OPENAI not in json.dumps(h) for h in hits)
    assert "[redacted: openai key]" in json.dumps(hits)
    assert store.open("mem_keys")["markdown"] == before.decode()  # the file is the user's: open shows it
    nowhere(store, GITHUB, OPENAI, skip=(path,))


def test_profiles_and_the_working_page_are_injected_without_secrets(store, cfg):
    store.context()  # makes the profiles
    user = cfg.profiles_dir / "user.md"
    user.write_text(f"I deploy with {GITHUB}.\n<private>my salary is 120k</private>\nI like tea.\n")
    from marchdb.lifecycle.now import page_path

    page_path(cfg.home).write_text(f"Fixing the deploy, key {AWS}\n")
    text = store.context()["text"]
    assert "[redacted: github token]" in text and "[redacted: aws access key]" in text
    assert GITHUB not in text and AWS not in text and "salary" not in text and "I like tea." in text
    kinds = {(Path(p["path"]).name, p["kind"]) for p in store.doctor()["problems"]}
    assert {("user.md", "secret"), ("now.md", "secret")} <= kinds
    assert user.read_text().startswith(f"I deploy with {GITHUB}")  # never rewritten


# ---------------------------------------------------------------- <private>


def test_private_regions_are_never_indexed_searched_or_recalled_but_open_shows_them(store, vault):
    path = vault.memory(
        "health.md",
        "mem_health",
        name="Running plan",
        description="Three runs a week, long one on Sunday",
        tags=["health"],
        body="Tuesday intervals.\n\n<private>\nDoctor said: hypertension, zorbaflex 20 mg.\n</private>\n\nSunday long run.\n",
    )
    store.sync(embed=False)
    chunks = "".join(r[0] for r in store.con.execute("SELECT text FROM chunks"))
    assert "Tuesday intervals." in chunks and "zorbaflex" not in chunks and "hypertension" not in chunks
    assert store.search("zorbaflex")["results"] == []
    assert store.search("Sunday")["results"][0]["id"] == "mem_health"
    explained = store.recall("zorbaflex hypertension", explain=True)
    assert all(c.id != "mem_health" for c in explained.candidates)
    assert "zorbaflex 20 mg" in store.open("mem_health")["markdown"]
    nowhere(store, "zorbaflex", skip=(path,))


# ---------------------------------------------------------------- the MCP tools and Hermes' provider


def test_hermes_tool_calls_keep_secrets_out(tmp_path, vault):
    """Hermes' provider runs ``marchdb call OP -`` with the model's arguments on stdin."""
    env = {
        **os.environ,
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"),
        "MARCH_DAEMON": "0",
    }
    args = {"name": "Bot token", "description": f"the bot's token is {GITHUB}", "body": "x", "tags": ["bot"]}
    done = subprocess.run(
        [MARCHDB, "call", "memory_save", "-"], input=json.dumps(args), capture_output=True, text=True, env=env
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["status"] == "created" and "secrets were kept out" in data["warnings"][0]
    logged = subprocess.run(
        [MARCHDB, "call", "memory_log", "-"],
        input=json.dumps({"title": "rotated", "text": f"password={PASSWORD}"}),
        capture_output=True,
        text=True,
        env=env,
    )
    assert logged.returncode == 0, logged.stderr
    assert files_holding(GITHUB, vault.root, tmp_path / "home") == []
    assert files_holding(PASSWORD, vault.root, tmp_path / "home") == []


@pytest.mark.model
def test_mcp_tools_keep_secrets_out(tmp_path, mixed_vault, default_model_path):
    from test_mcp import call

    from marchdb.config import load_config

    home = tmp_path / "home"
    with Store(load_config(home=home, root=mixed_vault.root, model=str(default_model_path), env={})) as s:
        s.sync()
    from mcp.client.stdio import StdioServerParameters

    exe = Path(sys.executable).with_name("marchdb")
    env = {
        "MARCH_HOME": str(home),
        "MARCH_MEMORY_ROOT": str(mixed_vault.root),
        "MARCH_EMBED_MODEL": str(default_model_path),
        "PATH": os.environ.get("PATH", ""),
        "MARCH_DAEMON": "0",
    }
    params = StdioServerParameters(command=str(exe), args=["mcp"], env=env)
    results = call(
        params,
        [
            ("save", "memory_save", {"name": "Key", "description": f"uses {OPENAI}", "body": "b", "tags": ["k"]}),
            ("log", "memory_log", {"title": f"pushed with {GITHUB}"}),
            ("now", "memory_now", {"text": f"deploying with {AWS}"}),
        ],
    )
    assert results["save"][0] is False and "secrets were kept out" in results["save"][1]["warnings"][0]
    assert results["now"][1]["text"] == "deploying with [redacted: aws access key]"
    for secret in (OPENAI, GITHUB, AWS):
        assert files_holding(secret, mixed_vault.root, home) == []


def test_an_index_made_before_redaction_is_rebuilt_without_the_secret(vault, cfg):
    """An index of an earlier marchdb holds hand-written files as they were:
    its schema version makes the next open rebuild it from the files."""
    vault.memory("keys.md", "mem_keys", name="Keys", description=f"CI token {GITHUB}", tags=["ci"], body="b")
    with Store(cfg) as store:
        store.sync(embed=False)
        with db.transaction(store.con):  # as the earlier release indexed it
            store.con.execute("UPDATE memory_index SET description = ? WHERE id = 'mem_keys'", (f"CI token {GITHUB}",))
        store.con.pragma("user_version", db.SCHEMA_VERSION - 1)
    assert files_holding(GITHUB, cfg.home)
    with Store(cfg) as store:
        store.sync(embed=False)
        row = db.rows(store.con, "SELECT description FROM memory_index WHERE id = 'mem_keys'")[0]
        assert row["description"] == "CI token [redacted: github token]"
    assert files_holding(GITHUB, cfg.home) == []  # the old tables' pages were zeroed, not only freed


def test_the_steer_after_a_tool_reads_a_transcript_with_a_secret_and_keeps_nothing_of_it(store, mixed_vault, tmp_path):
    from marchdb.hosts import adapter
    from marchdb.hosts.hook import answer_here

    store.sync(embed=False)
    transcript = tmp_path / "t.jsonl"
    said = f"Biscuit's carprofen tablet; I pushed the fix with {GITHUB} and password={PASSWORD}"
    lines = [
        {"type": "user", "message": {"content": "give the dog his medication"}},
        {"type": "assistant", "message": {"content": [{"type": "text", "text": said}]}},
    ]
    transcript.write_text("".join(json.dumps(x) + "\n" for x in lines))
    module = adapter("claude-code")
    base = {"session_id": "steer", "cwd": "/tmp", "transcript_path": str(transcript)}
    answer_here(
        store, module, module.parse(json.dumps({**base, "hook_event_name": "UserPromptSubmit", "prompt": "hi"}), [])
    )
    steer = answer_here(store, module, module.parse(json.dumps({**base, "hook_event_name": "PostToolUse"}), []))
    assert GITHUB not in steer["stdout"]
    nowhere(store, GITHUB, PASSWORD)
