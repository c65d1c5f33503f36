"""Texts embedded one by one in a separate process: the one llama.cpp crashes on costs that process only, and is named.

After a process died while the model embedded a batch (``index.sentinel``),
the batch's texts are suspects. Embedding them again here, in a batch or
alone, would crash this process too; a child process embeds them instead,
one text per call, and answers each vector as soon as it has it. When the
child dies of a signal, the text it was on is the culprit; a new child goes
on with the texts after it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from marchdb.errors import ModelError

if TYPE_CHECKING:
    import numpy as np

#: Seconds a child may take to load the model, and then per text.
LOAD_TIMEOUT = 180.0
TEXT_TIMEOUT = 30.0


def embed_alone(
    path: Path, prefix: str, extra_buffers: bool, texts: Sequence[str], crash_limit: int
) -> list[np.ndarray | str | None]:
    """Per text of ``texts``: its passage vector, made alone by the model at
    ``path`` (``prefix`` before it, llama.cpp's extra buffers on or off as in
    the caller) in a child process; or how llama.cpp crashed on it; or None
    when not tried, after ``crash_limit`` texts crashed in a row. Raises
    ModelError when a child fails for another reason (it crashed while
    loading, hung, could not start): nothing is known of the texts then."""
    import numpy as np

    out: list[np.ndarray | str | None] = [None] * len(texts)
    start, in_a_row = 0, 0
    while start < len(texts):
        answers, crash = _run_child(path, prefix, extra_buffers, list(texts[start:]))
        for j, blob in enumerate(answers):
            out[start + j] = np.frombuffer(blob, dtype=np.float32).copy()
        if crash is None:
            break
        culprit = start + len(answers)
        out[culprit] = crash
        in_a_row = 1 if answers else in_a_row + 1
        if in_a_row >= crash_limit:
            break
        start = culprit + 1
    return out


def _command() -> list[str]:
    # -I, as for the model check: nothing imported from the current folder
    # or PYTHONPATH; marchdb's own path is passed.
    paths = [p for p in sys.path if p and os.path.isabs(p)]
    boot = (
        "import sys, json; sys.path[:0] = json.loads(sys.argv[1]); "
        "from marchdb.embedding.children import isolate_main; isolate_main()"
    )
    return [sys.executable, "-I", "-c", boot, json.dumps(paths)]


def _run_child(path: Path, prefix: str, extra_buffers: bool, texts: list[str]) -> tuple[list[bytes], str | None]:
    """The vectors the child made, in order, and how it crashed (None: it
    made them all)."""
    request = json.dumps({"path": str(path), "prefix": prefix, "extra": extra_buffers, "texts": texts})
    timeout = LOAD_TIMEOUT + TEXT_TIMEOUT * len(texts)
    try:
        proc = subprocess.run(
            _command(), input=request.encode("utf-8"), capture_output=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise ModelError(
            f"llama.cpp did not finish embedding {len(texts)} text(s) one by one in {timeout:.0f} s; "
            "they are tried again at the next sync"
        ) from None
    except OSError as exc:
        raise ModelError(f"cannot start {sys.executable} to embed texts apart: {exc.strerror}") from None
    loaded = False
    answers: list[bytes] = []
    for line in proc.stdout.decode("utf-8", "replace").splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError):
            reply = json.loads(line)
            if reply.get("stage") == "loaded":
                loaded = True
            elif "v" in reply:
                answers.append(base64.b64decode(reply["v"]))
    if proc.returncode == 0 and len(answers) == len(texts):
        return answers, None
    if proc.returncode < 0 and loaded:
        try:
            name = signal.Signals(-proc.returncode).name
        except ValueError:
            name = f"signal {-proc.returncode}"
        return answers, f"llama.cpp crashed with {name} embedding it alone"
    tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
    raise ModelError(
        f"the process embedding texts apart failed (exit code {proc.returncode}"
        f"{'' if loaded else ', before the model was loaded'}: {tail[0][:200]}); they are tried again at the next sync"
    )
