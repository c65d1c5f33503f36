// marchdb's client inside a host's own process: the same engine relay and launcher its hooks use.
//
// ask(event) sends one event, in Claude Code's hook JSON, the way `marchdb hook HOST` does: first
// to the warm engine's socket as a relayed hook event (it reads, answers and renders it with the
// host's adapter), and when that cannot answer at once (no engine, a frozen one, other settings)
// through the hook command itself, which starts the engine, waits for it or answers from the
// keyword index. Whatever goes wrong, it answers "" and the host goes on.
import { spawn } from "node:child_process";
import { accessSync, constants, existsSync, readFileSync, writeFileSync } from "node:fs";
import { createConnection } from "node:net";
import { homedir } from "node:os";
import { join, resolve } from "node:path";

// Milliseconds without an answer after which the engine is pinged, as a hook's client does: a
// warm answer takes tens; an engine that answers the ping is busy and is waited for, one that does
// not is left to the hook command (it marks it frozen and answers from the keyword index).
const PATIENCE_MS = 250;
const PING_MS = 250;
// Milliseconds a whole answer may take (hosts give a hook 10 s).
const TIMEOUT_MS = 9000;

function flag(name) {
  const at = MARCHDB.indexOf(`--${name}`);
  return at >= 0 ? MARCHDB[at + 1] : undefined;
}

function expand(path) {
  return path === "~" || path.startsWith("~/") ? join(homedir(), path.slice(1)) : path;
}

function present() {
  // The program past "/usr/bin/env K=V..." and, for Python on marchdb's launcher, that file.
  try {
    accessSync(MARCHDB[0], constants.X_OK);
    return MARCHDB[1] !== "-I" || existsSync(MARCHDB[3]);
  } catch {
    return false;
  }
}

function environment() {
  const env = { ...process.env, ...ENV };
  for (const key of Object.keys(env)) if (typeof env[key] !== "string") delete env[key];
  if (env.MARCH_MEMORY_ROOT) env.MARCH_MEMORY_ROOT = resolve(expand(env.MARCH_MEMORY_ROOT));
  const model = env.MARCH_EMBED_MODEL || "";
  if (model.includes("/") || model.endsWith(".gguf")) env.MARCH_EMBED_MODEL = resolve(expand(model));
  return env;
}

function marchHome(env) {
  const given = flag("home") || env.MARCH_HOME;
  return given ? resolve(expand(given)) : join(homedir(), ".march");
}

// One request on its own connection: the answer line parsed, or null (no answer within ms, or
// dropped with cancel()).
function exchange(socket, request, ms) {
  let cancel = () => {};
  const promise = new Promise((done) => {
    const chunks = [];
    let settled = false;
    const finish = (value) => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      conn.destroy();
      done(value);
    };
    cancel = () => finish(null);
    const timer = setTimeout(() => finish(null), ms);
    const conn = createConnection(socket);
    conn.on("error", () => finish(null));
    // write, not end: the engine answers the line, and Bun closes the whole socket on end()
    conn.on("connect", () => conn.write(`${JSON.stringify(request)}\n`));
    conn.on("data", (chunk) => {
      chunks.push(chunk);
      const line = Buffer.concat(chunks).toString("utf8");
      if (!line.includes("\n")) return;
      try {
        finish(JSON.parse(line.split("\n", 1)[0]));
      } catch {
        finish(null);
      }
    });
    conn.on("end", () => finish(null));
  });
  promise.cancel = cancel;
  return promise;
}

async function relay(event, env) {
  const home = marchHome(env);
  const socket = join(home, "marchdb.sock");
  // Engine off, a frozen engine (the hook command answers at once from the keyword index and
  // asks it again later), a socket path too long for connect(): the hook command answers.
  const off = ["0", "off", "no", "false"].includes((env.MARCH_DAEMON || "").trim().toLowerCase());
  if (off || existsSync(join(home, "engine.stuck")) || Buffer.byteLength(socket) > 100 || !existsSync(socket)) {
    return null;
  }
  if (stopped(home)) {
    markStuck(home); // the hook command then answers at once from the keyword index
    return null;
  }
  const flags = {};
  for (const key of ["root", "model"]) if (flag(key)) flags[key] = flag(key);
  const started = Date.now();
  const request = {
    v: 1,
    op: "hook_event",
    args: { host: HOST, options: [], event: JSON.stringify(event), flags, env },
    identity: null,
    // The engine records nothing once this client has stopped waiting.
    deadline: started / 1000 + (TIMEOUT_MS - 500) / 1000,
  };
  const answer = exchange(socket, request, TIMEOUT_MS);
  let settled = false;
  answer.then(() => {
    settled = true;
  });
  // Past the patience, an engine that answers no ping is frozen: the hook command takes over
  // (and the request's answer, should it come, is dropped by the engine's deadline or here).
  while (!settled) {
    const waited = await Promise.race([answer.then(() => true), sleep(PATIENCE_MS).then(() => false)]);
    if (waited) break;
    const pong = await exchange(socket, { v: 1, op: "ping", args: {} }, PING_MS);
    if (!(pong && pong.ok)) {
      answer.cancel(); // nothing waits on it any more
      markStuck(home); // as the hook's client marks it: the hook command then answers at once
      return null;
    }
  }
  const got = await answer;
  return got && got.ok && typeof got.data?.stdout === "string" ? got.data.stdout : null;
}

// Whether the engine is a stopped process (SIGSTOP, Ctrl-Z: state T or t in /proc): it answers
// nothing until it is continued, so it is found without waiting, as the hook's client finds it.
function stopped(home) {
  try {
    const pid = Number.parseInt(readFileSync(join(home, "daemon.lock"), "ascii").trim(), 10);
    if (!(pid > 0)) return false;
    const stat = readFileSync(`/proc/${pid}/stat`, "latin1");
    const state = stat.slice(stat.lastIndexOf(")") + 1).trim().split(" ", 1)[0];
    if (state !== "T" && state !== "t") return false;
    const args = readFileSync(`/proc/${pid}/cmdline`, "latin1").split("\0");
    return args.includes("serve") && args.some((a) => a.includes("marchdb"));
  } catch {
    return false; // no /proc, no engine: the ping decides
  }
}

// The mark a hook's client leaves for a frozen engine: "<its pid> <since>", kept when there.
function markStuck(home) {
  try {
    const pid = Number.parseInt(readFileSync(join(home, "daemon.lock"), "ascii").trim(), 10) || 0;
    writeFileSync(join(home, "engine.stuck"), `${pid} ${(Date.now() / 1000).toFixed(3)}\n`, { mode: 0o600, flag: "wx" });
  } catch {
    // already marked, or the home cannot be written: the hook command judges it itself
  }
}

function sleep(ms) {
  return new Promise((done) => setTimeout(done, ms).unref());
}

function launch(event, env) {
  return new Promise((done) => {
    let out = "";
    let child;
    try {
      child = spawn(MARCHDB[0], [...MARCHDB.slice(1), "hook", HOST], { env, stdio: ["pipe", "pipe", "ignore"] });
    } catch {
      done("");
      return;
    }
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT_MS);
    child.on("error", () => {
      clearTimeout(timer);
      done("");
    });
    child.stdout.setEncoding("utf8");
    child.stdout.on("data", (chunk) => {
      out += chunk;
    });
    child.on("close", () => {
      clearTimeout(timer);
      done(out);
    });
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify(event));
  });
}

async function ask(event) {
  if (!present()) return ""; // marchdb was removed: memory is off, the host runs on
  try {
    const env = environment();
    const relayed = await relay(event, env);
    return (relayed ?? (await launch(event, env))).trim();
  } catch {
    return "";
  }
}

// The text of a chat message whose content is a string or a list of blocks (pi, OpenClaw).
function wordsOf(message) {
  const content = message && message.content;
  if (typeof content === "string") return content.trim();
  return (Array.isArray(content) ? content : [])
    .filter((b) => b && b.type === "text" && typeof b.text === "string")
    .map((b) => b.text)
    .join("\n")
    .trim();
}
