"""`marchdb browse`: Datasette over the index, through its test client and in a real browser."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from typer.testing import CliRunner

from marchdb.browse import server as browse
from marchdb.cli.demo import MEMORIES
from marchdb.cli.main import app
from marchdb.config import load_config
from marchdb.store import Store

#: The tests that serve the index need the extra; the one about its absence does not.
needs_datasette = pytest.mark.skipif(
    importlib.util.find_spec("datasette") is None,
    reason="the browse extra is not installed: pip install -e '.[test]' (it includes it)",
)


def test_without_datasette_browse_says_how_to_install(tmp_path, vault, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasette", None)  # as if the extra were not installed
    monkeypatch.setitem(sys.modules, "datasette.utils.sqlite", None)
    result = CliRunner().invoke(app, ["--home", str(tmp_path / "home"), "--root", str(vault.root), "browse"])
    assert result.exit_code == 3
    assert result.stderr.strip() == "error: " + browse.INSTALL_HINT
    assert "pip install -e '.[browse]'" in result.stderr


def _get(ds, path: str):
    async def fetch():
        await browse.check(ds)
        return await ds.client.get(path)

    return asyncio.run(fetch())


def _rows(ds, path: str) -> list[dict]:
    response = _get(ds, path + ("&" if "?" in path else "?") + "_shape=array")
    assert response.status_code == 200, response.text
    return response.json()


def _close(ds) -> None:
    from marchdb.browse import plugin as browse_plugin

    browse_plugin.detach(ds)
    ds.get_database(browse.DB_NAME).close()


@needs_datasette
def test_canned_queries_without_a_model(tmp_path, mixed_vault, capfd):
    mixed_vault.write("bad.md", "---\nid: [x\n---\n")
    cfg = load_config(home=tmp_path / "home", root=mixed_vault.root, model=str(tmp_path / "none.gguf"), env={})
    with Store(cfg) as store:
        store.sync()
        store.recall("Context cache ordering", run_id="run-1")
        store.open("mem_dog")
        ds = browse.build(store)
    try:
        found = _rows(ds, "/marchdb/recall.json?text=Context+cache+ordering")
        assert found[0]["id"] == "mem_cache" and found[0]["verdict"] == "HINT" and found[0]["mode"] == "bm25"
        assert _rows(ds, "/marchdb/recall.json") == []  # the empty form shows nothing, not an error
        problems = {(r["kind"], r["path"]) for r in _rows(ds, "/marchdb/problems.json")}
        assert ("parse_error", "bad.md") in problems and ("missing_vector", "2026/05/week2/mem_dog.md") in problems
        history = _rows(ds, "/marchdb/hint_history.json")
        assert [(r["run_id"], r["trigger"], r["id"]) for r in history] == [("run-1", "user", "mem_cache")]
        use = {r["id"]: (r["hinted"], r["opened"]) for r in _rows(ds, "/marchdb/memory_use.json")}
        assert use["mem_cache"] == (1, 0) and use["mem_dog"] == (0, 1)
        # A refusal is shown as a row a person can read (pysqlite3 would drop the message).
        missing = _rows(ds, "/marchdb/neighbours.json?id=mem_nope")
        assert len(missing) == 1 and "no memory has id mem_nope" in missing[0]["name"]
        assert {k for k, v in missing[0].items() if v is not None} == {"name"}
        assert "has no vector yet" in _rows(ds, "/marchdb/neighbours.json?id=mem_cache")[0]["name"]
        # Arbitrary SQL is read-only, and so are the functions behind it.
        fts_row = _rows(ds, "/marchdb.json?sql=select+march_fts('记忆系统')+as+t")
        assert fts_row == [{"t": " 记忆 忆系 系统 "}]
        logged = _rows(ds, "/marchdb.json?sql=select+march_recall_json('cache','user','run-x')+as+j")
        assert "read-only" in json.loads(logged[0]["j"])[0]["error"]
        extra = _rows(ds, "/marchdb.json?sql=select+march_recall_json('cache','user',null,null,null,'x')+as+j")
        assert "takes a text" in json.loads(extra[0]["j"])[0]["error"]  # an argument too many is not dropped
        capfd.readouterr()
        assert _get(ds, "/marchdb.json?sql=delete+from+memory_index").status_code == 400
        printed = capfd.readouterr()
        assert "Traceback" not in printed.out + printed.err  # a refused query is no crash to print
        tables = {t["name"]: t["hidden"] for t in _get(ds, "/marchdb.json").json()["tables"]}
        assert tables["memory_index"] is False and tables["fts_data"] is True
    finally:
        _close(ds)
    with Store(cfg) as store:
        assert store.status()["memories"] == 5  # nothing changed
        assert store.query("SELECT count(*) FROM recall_log")[1] == [(1,)]


def test_an_sqlite3_module_too_old_for_the_index_is_refused_with_what_to_do():
    said = browse.sqlite_too_old((3, 40, 1))
    assert said and "SQLite 3.40.1" in said and "3.43.0 or later" in said and "pip install" in said
    assert browse.sqlite_too_old((3, 43, 0)) is None and browse.sqlite_too_old((3, 51, 1)) is None


PORT = 8123
KEY = "k" * 22


def _guarded_get(ds, path: str, headers: dict | None = None, key: str | None = KEY):
    """A request through the guard ``marchdb browse`` puts before Datasette,
    as a browser on this machine sends it (Host, the run's cookie)."""
    import httpx

    async def fetch():
        await browse.check(ds)
        app = browse.guard(ds.app(), PORT, KEY)
        cookies = {browse.cookie_name(PORT): key} if key else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), cookies=cookies) as client:
            return await client.get(
                f"http://127.0.0.1:{PORT}{path}", headers={"host": f"127.0.0.1:{PORT}", **(headers or {})}
            )

    return asyncio.run(fetch())


@needs_datasette
def test_only_this_sites_pages_and_this_runs_key_are_answered(tmp_path, vault):
    # A cross-site <img src="http://127.0.0.1:PORT/marchdb?sql=..."> was served: timing a
    # CASE WHEN <a memory's text> THEN <a heavy CTE> read a memory's text in 288 requests.
    vault.memory("a.md", "mem_a", name="The secret plan")
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    with Store(cfg) as store:
        store.sync(embed=False)
        ds = browse.build(store)
    sql = "/marchdb.json?_shape=array&sql=select+name+from+memory_index"
    try:
        ok = _guarded_get(ds, sql, {"sec-fetch-site": "same-origin", "referer": f"http://127.0.0.1:{PORT}/marchdb"})
        assert ok.status_code == 200 and ok.json() == [{"name": "The secret plan"}]
        assert _guarded_get(ds, sql, {"sec-fetch-site": "none"}).status_code == 200  # typed in the address bar
        assert _guarded_get(ds, sql, {"origin": f"http://localhost:{PORT}"}).status_code == 200
        for headers in (
            {"sec-fetch-site": "cross-site"},
            {"sec-fetch-site": "same-site"},  # another port of this machine: another origin
            {"origin": "https://evil.example"},
            {"origin": "null"},
            {"origin": f"http://127.0.0.1:{PORT + 1}"},
            {"referer": "https://evil.example/page.html"},
            {"sec-fetch-site": "same-origin", "referer": "https://evil.example/"},
        ):
            refused = _guarded_get(ds, sql, headers)
            assert refused.status_code == 403 and "secret" not in refused.text, headers
            assert "another site" in refused.text, refused.text
        # Without this run's key (another user of this machine, a page that guessed the port):
        for key in (None, "wrong"):
            refused = _guarded_get(ds, sql, {"sec-fetch-site": "none"}, key=key)
            assert refused.status_code == 403 and "the address `marchdb browse` printed" in refused.text
        # The printed address carries the key: it becomes a cookie, and the key leaves the URL.
        first = _guarded_get(ds, f"/marchdb?{browse.KEY_PARAM}={KEY}", {"sec-fetch-site": "none"}, key=None)
        assert first.status_code == 302 and first.headers["location"] == "/marchdb"
        cookie = first.headers["set-cookie"]
        assert cookie.startswith(f"{browse.cookie_name(PORT)}={KEY};") and "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        kept = _guarded_get(ds, f"/marchdb/memory_index?{browse.KEY_PARAM}={KEY}&_sort=id", key=None)
        assert kept.status_code == 302 and kept.headers["location"] == "/marchdb/memory_index?_sort=id"
        wrong = _guarded_get(ds, f"/marchdb?{browse.KEY_PARAM}=nope", key=None)
        assert wrong.status_code == 403 and "set-cookie" not in wrong.headers
        # What was refused before still is.
        assert _guarded_get(ds, sql, {"host": f"evil.example:{PORT}"}).status_code == 421
    finally:
        _close(ds)


@needs_datasette
def test_a_query_is_stopped_after_two_seconds_and_says_why(tmp_path, vault, monkeypatch):
    # An endless recursive CTE burnt 20 s of CPU per request (Datasette's limit was 20 s).
    assert browse.SQL_TIME_LIMIT_MS == 2_000
    # Each endless query runs to the bound: a shorter one here, which the page names.
    monkeypatch.setattr(browse, "SQL_TIME_LIMIT_MS", 400)
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    with Store(cfg) as store:
        store.sync(embed=False)
        ds = browse.build(store)
    try:
        assert ds.setting("sql_time_limit_ms") == 400
        endless = "with+recursive+c(x)+as+(select+1+union+all+select+x%2B1+from+c)+select+count(*)+from+c"
        page = _get(ds, f"/marchdb?sql={endless}")
        assert page.status_code == 400
        assert "ran for more than 0.4 s and was stopped" in page.text and "marchdb sql --timeout" in page.text
        answer = _get(ds, f"/marchdb.json?sql={endless}")
        assert answer.status_code == 400 and "more than 0.4 s" in answer.json()["error"]
    finally:
        _close(ds)


SIDE_BY_SIDE = """
import asyncio, sys
from marchdb.browse import plugin as browse_plugin
from marchdb.browse import server as browse
from marchdb.index import db
from marchdb.config import load_config
from marchdb.store import Store

cfg = load_config(home=sys.argv[1], root=sys.argv[2], model=sys.argv[3], env={})
SQL = "/marchdb.json?_shape=array&sql=select+vec_distance_cosine(vec_f32('[1,0]'),vec_f32('[0,1]'))+as+d"

async def get(ds, path):
    await browse.check(ds)
    return (await ds.client.get(path)).json()

def datasette():
    with Store(cfg) as store:
        store.sync(embed=False)
        return browse.build(store)

def knn(con):
    if not con.execute("SELECT 1 FROM temp.sqlite_master WHERE name = 'v'").fetchall():
        con.execute("CREATE VIRTUAL TABLE temp.v USING vec0(e float[2])")
        con.execute("INSERT INTO temp.v(rowid, e) VALUES (1, vec_f32('[1,0]')), (2, vec_f32('[0,1]'))")
    return con.execute("SELECT rowid FROM temp.v WHERE e MATCH vec_f32('[0.9,0.1]') AND k = 1").fetchall()

first = datasette()
assert asyncio.run(get(first, SQL)) == [{"d": 1.0}]
browse_plugin.detach(first)
first.get_database("marchdb").close()
# No apsw connection is open now: SQLite unloaded the extension, and this
# connection maps it again, after Datasette's copy.
con = db.connect(cfg.index_path)
assert knn(con) == [(1,)]
second = datasette()
assert asyncio.run(get(second, SQL)) == [{"d": 1.0}]  # Datasette's connections load the copy again
assert knn(con) == [(1,)]  # ... and apsw's vec0 still calls apsw's SQLite
assert asyncio.run(get(second, SQL)) == [{"d": 1.0}]
print("ok")
"""


@needs_datasette
def test_sqlite_vec_in_datasette_and_apsw_side_by_side(tmp_path, vault):
    # Regression: apsw and pysqlite3 (two SQLite builds) loading sqlite-vec in
    # one process segfaulted: the second load took over the library's API table.
    # A fresh interpreter, so that the loading order is the one a user gets.
    result = subprocess.run(
        [sys.executable, "-c", SIDE_BY_SIDE, str(tmp_path / "home"), str(vault.root), str(tmp_path / "none.gguf")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


# ---------------------------------------------------------------- with the real model


@pytest.fixture
def demo_store(vault, model_cfg):
    """The demo's memories, indexed and embedded with the real model; yields (store, cache memory id)."""
    with Store(model_cfg) as store:
        saved = [store.save(embed=False, **mem) for mem in MEMORIES]
        store.sync()
        yield store, saved[0]["id"]


@needs_datasette
def test_recall_and_neighbours_through_datasette(demo_store):
    store, cache_id = demo_store
    ds = browse.build(store)
    try:
        found = _rows(ds, "/marchdb/recall.json?text=why+does+the+prompt+cache+miss%3F")
        assert found[0]["id"] == cache_id and found[0]["verdict"] == "HINT" and found[0]["mode"] == "hybrid"
        assert [r["verdict"] for r in found[1:]] == ["score below threshold 0.50"] * (len(found) - 1)
        explained = store.recall("why does the prompt cache miss?", explain=True)
        assert [(r["id"], r["score"]) for r in found] == [(c.id, round(c.score, 3)) for c in explained.candidates]
        near = _rows(ds, f"/marchdb/neighbours.json?id={cache_id}")
        assert len(near) == 4 and cache_id not in [r["id"] for r in near] and near[0]["cosine"] >= near[-1]["cosine"]
        tables = {t["name"]: t["hidden"] for t in _get(ds, "/marchdb.json").json()["tables"]}
        assert tables["vec_meta"] is False and tables["vec_meta_chunks"] is True and tables["vec_meta_bits"] is True
        assert tables["vec_meta_vector_chunks00"] is True and tables["vec_chunk_vector_chunks00"] is True
        assert tables["vectors"] is False
    finally:
        _close(ds)


# ---------------------------------------------------------------- a real browser

CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
#: Set to a path to keep the screenshot (docs/browse.png was made this way).
SCREENSHOT_ENV = "MARCHDB_SCREENSHOT"


def _browser():
    """A headless Debian chromium driven by selenium, or a skip saying what is missing."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    if missing:
        pytest.skip(
            f"no browser for the browse test: {', '.join(missing)} missing "
            "(apt-get install -y chromium chromium-driver; .ci/run does it)"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.options import Options
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed: pip install -e '.[test]'")
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--window-size=1200,900",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL"})  # the statuses of every request
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def _printed_address(server, seconds: float) -> str:
    """The address ``marchdb browse`` printed on stderr once it was up."""
    import threading

    found: list[str] = []
    lines: list[str] = []

    def read():
        for line in server.stderr:
            lines.append(line)
            if line.startswith("marchdb browse: http"):
                found.append(line.split()[2])
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)
    if not found:
        raise AssertionError(f"marchdb browse did not start: {''.join(lines)[-3000:]}")
    return found[0]


def _statuses(driver, prefix: str) -> list[int]:
    """The HTTP statuses of the browser's requests to URLs starting with ``prefix`` (DevTools log)."""
    out = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.responseReceived":
            response = message["params"]["response"]
            if response["url"].startswith(prefix):
                out.append(response["status"])
    return out


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _listening_addresses(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port`` (Linux /proc)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        for line in Path(table).read_text().splitlines()[1:]:
            local, _remote, state = line.split()[1:4]
            address, hexport = local.rsplit(":", 1)
            if state == "0A" and int(hexport, 16) == port:
                found.add(address)
    return found


@needs_datasette
def test_browse_in_a_real_browser(tmp_path, demo_store, default_model_path):
    store, cache_id = demo_store
    driver = _browser()
    port = _free_port()
    private_tmp = tmp_path / "tmp"  # where browse puts its copy of sqlite-vec
    private_tmp.mkdir()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "marchdb",
            "--home",
            str(store.cfg.home),
            "--root",
            str(store.root),
            "--model",
            str(default_model_path),
            "browse",
            "--port",
            str(port),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )
    base = f"http://127.0.0.1:{port}/marchdb"
    evil = None
    try:
        printed = _printed_address(server, 120)  # the run's key is in it
        assert printed.startswith(f"{base}?{browse.KEY_PARAM}=")
        key = printed.split("=", 1)[1]
        cookie = {"Cookie": f"{browse.cookie_name(port)}={key}"}
        versions_url = f"http://127.0.0.1:{port}/-/versions.json"
        deadline = time.monotonic() + 60
        while True:  # printed just before uvicorn listens
            try:
                with urllib.request.urlopen(urllib.request.Request(versions_url, headers=cookie), timeout=10) as r:
                    versions = json.load(r)
                break
            except urllib.error.URLError as exc:
                if isinstance(exc, urllib.error.HTTPError) or server.poll() is not None:
                    raise
                if time.monotonic() > deadline:
                    raise AssertionError("marchdb browse printed its address but does not listen") from None
                time.sleep(0.2)
        assert versions["datasette"]["version"] == "0.65.5"
        if os.path.exists("/proc/net/tcp"):
            assert _listening_addresses(port) == {"0100007F"}  # 127.0.0.1 only
        # A page of another site reaching 127.0.0.1 through DNS rebinding names its own host; nothing
        # may write; a request without this run's key is refused.
        for request, status in (
            (urllib.request.Request(f"{base}.json", headers={**cookie, "Host": f"evil.example:{port}"}), 421),
            (urllib.request.Request(f"{base}/recall", data=b"text=hi", method="POST", headers=cookie), 405),
            (urllib.request.Request(f"{base}.json"), 403),
        ):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(request, timeout=10)
            assert refused.value.code == status

        # A page of another site (localhost is another site than 127.0.0.1) that the user visits
        # after opening browse, asking for the index with an <img> and a no-cors fetch.
        evil_port = _free_port()
        evil_dir = tmp_path / "evil"
        evil_dir.mkdir()
        sql = "select+name+from+memory_index"
        (evil_dir / "index.html").write_text(
            f'<img src="{base}.json?sql={sql}"><script>fetch("{base}.json?sql={sql}&x=2", {{mode: "no-cors"}})'
            '.then(() => document.title = "fetched", () => document.title = "failed")</script>'
        )
        evil = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(evil_port), "--bind", "127.0.0.1", "--directory", str(evil_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

        from selenium.webdriver.common.by import By
        from selenium.webdriver.support import expected_conditions
        from selenium.webdriver.support.ui import WebDriverWait

        def cells(column: str) -> list[str]:
            return [td.text for td in driver.find_elements(By.CSS_SELECTOR, f"table.rows-and-columns td.col-{column}")]

        def submit(field: str, value: str) -> None:
            """Type into the form's field and run it; wait for the answer page."""
            driver.find_element(By.NAME, field).send_keys(value)
            driver.find_element(By.CSS_SELECTOR, "form.sql input[type=submit]").click()
            WebDriverWait(driver, 60).until(expected_conditions.url_contains(f"{field}="))
            WebDriverWait(driver, 60).until(
                expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "table.rows-and-columns td"))
            )

        # What a person does: open the address browse printed, then the recall page, type a message, run it.
        driver.get(printed)
        assert driver.current_url == base  # the key went into a cookie, out of the address
        driver.get(f"{base}/recall")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Recall, explained"
        submit("text", "why does the prompt cache miss?")
        assert "text=why+does+the+prompt+cache+miss" in driver.current_url
        assert cells("id")[0] == cache_id and cells("verdict")[0] == "HINT"
        assert cells("name")[0] == "Context cache ordering"
        assert all(v.startswith("score below") for v in cells("verdict")[1:])
        shot = tmp_path / "browse.png"
        driver.save_screenshot(str(shot))
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
        if os.environ.get(SCREENSHOT_ENV):
            shutil.copyfile(shot, os.environ[SCREENSHOT_ENV])

        # Its neighbours, from the id in the table.
        driver.get(f"{base}/neighbours")
        submit("id", cache_id)
        assert len(cells("id")) == 4 and cache_id not in cells("id")

        # The other pages a person would look at.
        driver.get(f"{base}/memory_use")
        assert driver.find_element(By.TAG_NAME, "h1").text == "Memory use"
        assert "Context cache ordering" in cells("name")
        driver.get(base)
        page = driver.find_element(By.TAG_NAME, "body").text
        for title in ("Recall, explained", "Problems", "Hint history", "Memory use", "nearest neighbours"):
            assert title in page, title
        assert [p.name for p in private_tmp.iterdir()][0].startswith("marchdb-vec0-")

        # The other site's page, in the browser that holds the key: its requests are refused.
        driver.get_log("performance")  # what came before
        deadline = time.monotonic() + 60
        while True:
            try:
                driver.get(f"http://localhost:{evil_port}/index.html")
                break
            except Exception:  # noqa: BLE001 - the little server is still starting
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)
        WebDriverWait(driver, 60).until(lambda d: d.title in ("fetched", "failed"))
        statuses = _statuses(driver, f"{base}.json")
        assert len(statuses) == 2 and set(statuses) == {403}, statuses
    finally:
        if evil is not None:
            evil.terminate()
            evil.wait(10)
        driver.quit()
        server.terminate()
        try:
            server.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
    assert server.returncode == 128 + signal.SIGTERM  # the shell's convention for a SIGTERM
    assert list(private_tmp.iterdir()) == []  # stopped as a service manager stops it, it cleaned up


@needs_datasette
def test_a_websocket_request_is_refused_before_it_reaches_datasette(tmp_path, vault):
    # With `websockets` installed, uvicorn handed WebSocket requests to the
    # app past the guard: no Host, key or site check, a 500 and three
    # tracebacks each. As a user's machine runs it: `marchdb browse`, a client.
    websockets = pytest.importorskip("websockets")
    vault.memory("a.md", "mem_a", name="The secret plan")
    port = _free_port()
    env = {
        **os.environ,
        "MARCH_HOME": str(tmp_path / "home"),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_EMBED_MODEL": str(tmp_path / "none.gguf"),
    }
    server = subprocess.Popen(
        [sys.executable, "-m", "marchdb", "browse", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        printed = _printed_address(server, 120)
        key = printed.split("=", 1)[1]
        deadline = time.monotonic() + 60
        while not _listening_addresses(port) and time.monotonic() < deadline:
            time.sleep(0.1)

        async def attempt(path: str, headers: dict) -> str:
            try:
                async with websockets.connect(
                    f"ws://127.0.0.1:{port}{path}", additional_headers=headers, open_timeout=10
                ) as ws:
                    return f"open: {await asyncio.wait_for(ws.recv(), 5)!r}"
            except Exception as exc:  # noqa: BLE001 - what the client saw, whatever it was
                return f"{type(exc).__name__}: {exc}"

        cookie = {"Cookie": f"{browse.cookie_name(port)}={key}"}
        sql = "/marchdb.json?sql=select+name+from+memory_index"
        for path, headers in ((sql, {}), (sql, cookie), ("/marchdb", {"Origin": "https://evil.example", **cookie})):
            seen = asyncio.run(attempt(path, headers))
            assert not seen.startswith("open") and "secret" not in seen, seen
            assert "500" not in seen, seen
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert "Traceback" not in err, err[-3000:]


@needs_datasette
def test_a_request_that_cannot_say_where_it_comes_from_runs_no_sql_of_its_own(tmp_path, vault):
    # A browser without Fetch Metadata sends neither Sec-Fetch-Site nor, from
    # a page with referrerpolicy="no-referrer", a Referer; the run's cookie is
    # sent from any port of this machine (cookies do not tell ports apart).
    # Such a request cannot be told from a page on another port timing the
    # answers, so it gets no SQL of its own and a short time limit.
    vault.memory("a.md", "mem_a", name="The secret plan")
    cfg = load_config(home=tmp_path / "home", root=vault.root, model=str(tmp_path / "none.gguf"), env={})
    with Store(cfg) as store:
        store.sync(embed=False)
        ds = browse.build(store)
    sql = "/marchdb.json?_shape=array&sql=select+name+from+memory_index"
    try:
        for path in (sql, "/marchdb/memory_index.json?_where=name+like+'The s%25'"):
            refused = _guarded_get(ds, path, {})
            assert refused.status_code == 403 and "secret" not in refused.text, path
            assert "Fetch Metadata" in refused.text, refused.text
        # The same from its own pages, or typed by the user in a browser that says so, runs.
        assert _guarded_get(ds, sql, {"sec-fetch-site": "none"}).status_code == 200
        assert _guarded_get(ds, sql, {"referer": f"http://127.0.0.1:{PORT}/marchdb"}).status_code == 200
        # Pages that run no SQL of the caller's stay readable, under the short limit.
        table = _guarded_get(ds, "/marchdb/memory_index.json?_shape=array", {})
        assert table.status_code == 200 and table.json()[0]["name"] == "The secret plan"
        assert browse.KEYLESS_TIME_LIMIT_MS < browse.SQL_TIME_LIMIT_MS
    finally:
        _close(ds)
