"""The dictionary that lets a message share words with a memory in the other
language (marchdb/bridge.py): what it keeps of CC-CEDICT, its cache file in
marchdb's home, and what it makes of real messages."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import apsw
import pytest

from marchdb import bridge


def test_parse_keeps_meanings_and_leaves_out_what_is_no_meaning():
    lines = [
        "# CC-CEDICT header",
        "密碼 密码 [mi4 ma3] /cipher; secret code/password; PIN/",
        "的 的 [de5] /of; ~'s (possessive particle)/",  # one character: left out
        "發布 发布 [fa1 bu4] /to release/to issue/to announce/to distribute/",
        "釋放 释放 [shi4 fang4] /to release/to set free/to liberate (a prisoner)/to discharge/",
        "放開 放开 [fang4 kai1] /to let go/to release/",
        "多久 多久 [duo1 jiu3] /(of time) how long?/(not) a long time/",
        "本 本 [ben3] /CL:本[ben3]/",
        "書本 书本 [shu1 ben3] /book/CL:本[ben3]/",
        "not a line of the dictionary",
    ]
    zh_en, en_zh = bridge.parse(lines)
    assert zh_en["密码"] == zh_en["密碼"] == ("cipher", "secret", "code", "password", "pin")
    assert "的" not in zh_en and "本" not in zh_en
    assert zh_en["书本"] == ("book",)  # the measure word is no meaning
    assert zh_en["多久"] == ()  # kept, so that segmenting does not cut through it, but says nothing
    # "release" is the first sense of 发布 and 释放, the second of 放开
    assert en_zh["release"][:4] == ("发布", "發布", "释放", "釋放")
    assert en_zh["release"][-2:] == ("放开", "放開")
    assert "long" not in en_zh and "time" not in en_zh  # common words (bridge.STOP)


def test_segment_takes_the_longest_word_from_the_left():
    known = {"数据库", "数据", "密码", "据库"}
    assert bridge.segment("测试数据库密码轮换", known) == [
        ("测试", False),
        ("数据库", True),
        ("密码", True),
        ("轮换", False),
    ]
    assert bridge.segment("", known) == []


@pytest.fixture
def fresh(monkeypatch):
    """The dictionary as a new process finds it: not yet opened."""
    monkeypatch.setattr(bridge, "_DICT", None)


def _cache_file(cache: Path) -> Path:
    return cache / bridge._cache_name()


def test_the_dictionary_is_kept_in_the_home_and_opened_from_there(tmp_path, fresh):
    # the one test that builds the file from the package's source into a new home
    cache = tmp_path / "home" / "cache"
    words = bridge.load(cache)
    path = _cache_file(cache)
    assert path.is_file() and not list(cache.glob(".*tmp"))
    assert dict(words.translate("数据库密码")) == {"数据库": ("database",), "密码": words.translate("密码")[0][1]}
    # the next process opens the file instead of reading the package's source
    bridge._DICT = None
    built = path.stat().st_mtime_ns
    started = time.perf_counter()
    again = bridge.load(cache)
    assert time.perf_counter() - started < 1.0  # opening, not parsing (~2 s)
    assert path.stat().st_mtime_ns == built
    assert again.translate("Can we ship a release on Friday?") == words.translate("Can we ship a release on Friday?")


def test_a_damaged_cache_file_is_made_again_and_one_of_an_earlier_form_removed(tmp_path, fresh, dictionary_file):
    cache = tmp_path / "cache"
    cache.mkdir()
    path = _cache_file(cache)
    path.write_bytes(b"not a database" * 100)
    # a whole file of an earlier form (other constants): not read, removed once the new one is made
    old = cache / "cedict-0.9-0123456789.sqlite"
    shutil.copyfile(dictionary_file, old)
    assert bridge.load(cache).translate("密码")
    assert path.is_file() and apsw.Connection(str(path)).execute("SELECT count(*) FROM en").get > 10_000
    assert not old.exists()


def test_a_link_planted_where_the_cache_file_goes_is_replaced_its_target_untouched(tmp_path, fresh):
    cache = tmp_path / "cache"
    cache.mkdir()
    path = _cache_file(cache)
    # replaced by a file, its target untouched
    target = tmp_path / "someone_elses.txt"
    target.write_text("keep me")
    path.symlink_to(target)
    assert bridge.load(cache).translate("密码")
    assert not path.is_symlink() and path.is_file()
    assert target.read_text() == "keep me"


def test_a_linked_cache_folder_is_not_written_through(tmp_path, fresh):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "cache").symlink_to(elsewhere)
    assert bridge.load(tmp_path / "cache").translate("密码")
    assert not list(elsewhere.iterdir())


def test_a_home_where_the_file_cannot_be_written_still_has_the_dictionary(tmp_path, fresh):
    # "cache" is a file here: no folder can be made (as with a read-only home)
    cache = tmp_path / "cache"
    cache.write_text("a file of the user's")
    assert bridge.load(cache).translate("密码")
    assert cache.read_text() == "a file of the user's"


@pytest.fixture(scope="module")
def words(dictionary_file):
    """The dictionary, on the run's file (``dictionary_file``)."""
    return bridge.Dictionary(apsw.Connection(str(dictionary_file), flags=apsw.SQLITE_OPEN_READONLY))


@pytest.mark.parametrize(
    ("message", "source", "expected"),
    [
        ("测试环境的数据库密码多久轮换一次？", "数据库", "database"),
        ("夜间备份失败了怎么办？", "备份", "backup"),
        ("報銷需要哪些單據？", "報銷", "reimbursement"),  # Traditional characters too
        ("Can we ship a release on Friday?", "release", "发布"),
        ("When is my child's next vaccine shot?", "vaccine", "疫苗"),
        ("What are our rules for database indexes?", "database", "數據庫"),
    ],
)
def test_messages_are_put_into_the_other_language(words, message, source, expected):
    translated = dict(words.translate(message))
    assert expected in translated[source], translated


def test_common_words_are_left_out_and_unknown_ones_kept_untranslated(words):
    assert words.translate("how long do we have to go this time") == ()
    assert words.translate("什么时候？你好，谢谢") == ()
    assert words.translate("") == ()
    # a name, a word the dictionary lacks: content all the same (recall.bridge_terms counts them)
    assert words.translate("How long has Melanie been creating art?") == (
        ("melanie", ()),
        ("creating", dict(words.translate("create"))["create"]),  # porter stems: "creating" is "create"
        ("art", dict(words.translate("art"))["art"]),
    )
    assert dict(words.translate("家里的绿植多久浇一次水？")) == {"家里": ("home",), "绿植": ()}


def test_a_long_message_asks_a_bounded_number_of_words(words):
    # a recalled message is at most recall.MAX_RECALL_CHARS characters, but
    # the dictionary bounds its own work too (bridge.MAX_RUNS, MAX_RUN_CHARS)
    text = "，".join(["数据库密码轮换" * 40] * 100)
    started = time.perf_counter()
    translated = words.translate(text)
    assert time.perf_counter() - started < 2.0
    assert len(translated) <= bridge.MAX_RUNS * bridge.MAX_RUN_CHARS // 2


def test_a_vault_in_one_script_never_loads_the_dictionary(tmp_path, vault):
    # ~2 s and 8 MB on a first recall, for words no memory of the vault could share;
    # and on every first save, with a model or without (the related memories it looks up).
    import subprocess
    import sys

    vault.memory("a.md", "mem_a", name="Deploy day", description="We deploy on Tuesdays", tags=["process"])
    code = (
        "import sys; from marchdb import Store; from marchdb.config import load_config; from marchdb import bridge;"
        f"s = Store(load_config(home={str(tmp_path / 'home')!r}, root={str(vault.root)!r}, env={{}}), use_model=False);"
        "s.sync(embed=False); s.save(name='Freeze', description='No deploys on Fridays', tags=['process'], body='b');"
        "s._embedder_error = None;"
        "from marchdb.embedding import Embedder\n"
        "class E(Embedder):\n"
        "    fingerprint, dim = 'e', 4\n"
        "    def embed(self, texts, kind, progress=None):\n"
        "        import numpy as np; return np.ones((len(texts), 4), dtype=np.float32) / 2\n"
        "s._embedder = E(); s.recall('when do we deploy?');"
        "s.save(name='Deploy window', description='We deploy before noon', tags=['process'], body='b');"
        "print(bridge._DICT is None)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr
