"""A small fake model server on 127.0.0.1 that records what hosts send to their model.

Real host programs (Claude Code, Codex CLI, Gemini CLI, Hermes Agent) are
pointed at it; a test then looks for a memory's id in the requests. It speaks
just enough of each dialect for one turn, or two when ``tool_call`` is given
(the first request that offers a shell tool is answered with a call to it,
the next with text):

* OpenAI chat completions (``/v1/chat/completions``, streamed or not) — Hermes;
* OpenAI responses (``/v1/responses``, streamed) — Codex CLI;
* Anthropic messages (``/v1/messages``, streamed or not) — Claude Code;
* Gemini (``/v1beta/models/M:generateContent`` and ``:streamGenerateContent``).

Model listings and probes get an empty or one-model answer. Only the standard library.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

REPLY = "FAKE-REPLY"


class FakeModel:
    """The server; ``with FakeModel() as fake:`` runs it on a thread; ``fake.url`` is its address."""

    def __init__(self, tool_call: str | None = None, tool_text: str = ""):
        #: Every request: ``{"method", "path", "body"}`` (the body parsed when it is JSON).
        self.requests: list[dict] = []
        self.tool_call = tool_call  # a shell command the model asks to run once
        self.tool_text = tool_text  # what the model says beside that call (an intermediate turn)
        self._called = False
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FakeModel:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def sent(self) -> str:
        """Everything the host sent its model, as one text (request bodies in JSON)."""
        return "\n".join(json.dumps(r["body"], ensure_ascii=False) for r in self.requests if r["body"])

    def model_requests(self) -> list[dict]:
        """The requests that asked the model for an answer (not listings or probes)."""
        return [r for r in self.requests if r["method"] == "POST" and _dialect(r["path"])]

    # ------------------------------------------------------------ answering

    def _want_call(self, body: dict) -> str | None:
        with self._lock:
            if self.tool_call is None or self._called or not body.get("tools") or _has_tool_result(body):
                return None
            self._called = True
            return self.tool_call

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _answer(self) -> None:
                size = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(size) if size else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                path = urlsplit(self.path).path
                with fake._lock:
                    fake.requests.append({"method": self.command, "path": path, "body": body})
                status, ctype, payload = fake._reply(self.command, self.path, body if isinstance(body, dict) else {})
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = _answer

        return Handler

    def _reply(self, method: str, full_path: str, body: dict) -> tuple[int, str, bytes]:
        path = urlsplit(full_path).path
        dialect = _dialect(path) if method == "POST" else None
        if dialect is None:
            if path.rstrip("/").endswith("/models"):
                models = [{"id": "fake-model", "object": "model", "context_length": 128000}]
                return 200, "application/json", json.dumps({"object": "list", "data": models, "models": []}).encode()
            return 404, "application/json", json.dumps({"error": {"message": f"no route {path}"}}).encode()
        call = self._want_call(body)
        stream = bool(body.get("stream")) or "stream" in path or "alt=sse" in full_path
        return getattr(self, f"_{dialect}")(body, call, stream)

    def _chat(self, body: dict, call: str | None, stream: bool) -> tuple[int, str, bytes]:
        message: dict = {"role": "assistant", "content": REPLY}
        if call:
            names = [(t.get("function") or {}).get("name") for t in body["tools"]]
            # The Cline CLI's shell tool takes a list of commands; other hosts' first tool takes one.
            tool = "run_commands" if "run_commands" in names else names[0] or "terminal"
            message = {"role": "assistant", "content": self.tool_text or None, "tool_calls": [_chat_call(tool, call)]}
        if not stream:
            choice = {"index": 0, "message": message, "finish_reason": "tool_calls" if call else "stop"}
            return _json({"id": "chat-1", "object": "chat.completion", "model": "fake-model", "choices": [choice]})
        delta = {"role": "assistant", **({"tool_calls": [dict(message["tool_calls"][0], index=0)]} if call else {})}
        if not call or self.tool_text:
            delta["content"] = self.tool_text if call else REPLY
        chunks = [
            {"id": "chat-1", "object": "chat.completion.chunk", "model": "fake-model", "choices": [c]}
            for c in (
                {"index": 0, "delta": delta, "finish_reason": None},
                {"index": 0, "delta": {}, "finish_reason": "tool_calls" if call else "stop"},
            )
        ]
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        chunks.append({"id": "chat-1", "object": "chat.completion.chunk", "choices": [], "usage": usage})
        return _sse([(None, c) for c in chunks] + [(None, "[DONE]")])

    def _responses(self, body: dict, call: str | None, stream: bool) -> tuple[int, str, bytes]:
        def said(text: str) -> dict:
            return {
                "type": "message",
                "role": "assistant",
                "id": "msg-1",
                "content": [{"type": "output_text", "text": text}],
            }

        items = [said(self.tool_text)] if call and self.tool_text else []
        if call:
            name, args = _codex_shell([t.get("name") for t in body.get("tools") or []], call)
            items.append({"type": "function_call", "call_id": "call-1", "name": name, "arguments": json.dumps(args)})
        else:
            items.append(said(REPLY))
        usage = {
            "input_tokens": 10,
            "input_tokens_details": None,
            "output_tokens": 5,
            "output_tokens_details": None,
            "total_tokens": 15,
        }
        events: list[tuple[str | None, object]] = [
            ("response.created", {"type": "response.created", "response": {"id": "resp-1"}})
        ]
        events += [("response.output_item.done", {"type": "response.output_item.done", "item": item}) for item in items]
        events.append(
            ("response.completed", {"type": "response.completed", "response": {"id": "resp-1", "usage": usage}})
        )
        return _sse(events)

    def _messages(self, body: dict, call: str | None, stream: bool) -> tuple[int, str, bytes]:
        blocks: list[dict] = [{"type": "text", "text": self.tool_text}] if call and self.tool_text else []
        if call:
            blocks.append({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": call}})
        else:
            blocks.append({"type": "text", "text": REPLY})
        stop = "tool_use" if call else "end_turn"
        message = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "fake"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }
        if not stream:
            return _json(message)
        events: list[tuple[str | None, object]] = [
            ("message_start", {"type": "message_start", "message": dict(message, content=[], stop_reason=None)})
        ]
        for i, block in enumerate(blocks):
            if block["type"] == "tool_use":
                opening = dict(block, input={})
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            else:
                opening = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            events += [
                ("content_block_start", {"type": "content_block_start", "index": i, "content_block": opening}),
                ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": i}),
            ]
        stopped = {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": {"output_tokens": 5}}
        events += [("message_delta", stopped), ("message_stop", {"type": "message_stop"})]
        return _sse(events)

    def _gemini(self, body: dict, call: str | None, stream: bool) -> tuple[int, str, bytes]:
        parts: list[dict] = [{"text": self.tool_text}] if call and self.tool_text else []
        if call:
            parts.append({"functionCall": {"name": "run_shell_command", "args": {"command": call}}})
        else:
            parts.append({"text": REPLY})
        answer = {
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
            "modelVersion": "fake-model",
        }
        return _sse([(None, answer)]) if stream else _json(answer)


def opencode_config(fake: FakeModel) -> dict:
    """opencode's (and Kilo's) config for talking to ``fake`` as an OpenAI-compatible provider."""
    return {
        "provider": {
            "fake": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Fake",
                "options": {"baseURL": f"{fake.url}/v1", "apiKey": "dummy"},
                "models": {"fake-model": {"name": "fake-model"}},
            }
        },
        "model": "fake/fake-model",
        "autoupdate": False,
        "share": "disabled",
    }


def _dialect(path: str) -> str | None:
    if path.endswith("/chat/completions"):
        return "chat"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "messages"
    if ":generateContent" in path or ":streamGenerateContent" in path:
        return "gemini"
    return None


def _has_tool_result(body: dict) -> bool:
    text = json.dumps(body)
    return any(
        marker in text for marker in ('"role": "tool"', '"function_call_output"', '"tool_result"', '"functionResponse"')
    )


def _chat_call(tool: str, command: str) -> dict:
    args = {"commands": [command]} if tool == "run_commands" else {"command": command}
    return {"id": "call_1", "type": "function", "function": {"name": tool, "arguments": json.dumps(args)}}


def _codex_shell(names: list, command: str) -> tuple[str, dict]:
    if "exec_command" in names:
        return "exec_command", {"cmd": command}
    if "shell_command" in names:
        return "shell_command", {"command": command}
    return "shell", {"command": ["bash", "-lc", command]}


def _json(obj: object) -> tuple[int, str, bytes]:
    return 200, "application/json", json.dumps(obj).encode()


def _sse(events: list[tuple[str | None, object]]) -> tuple[int, str, bytes]:
    out = []
    for name, data in events:
        text = data if isinstance(data, str) else json.dumps(data)
        out.append((f"event: {name}\n" if name else "") + f"data: {text}\n\n")
    return 200, "text/event-stream", "".join(out).encode()
