"""Text the CLI prints for recall and context answers (``tools.call`` data).

Shared by the CLI's commands and the quick path of ``entry`` (a warm engine
already running answers ``marchdb recall`` without loading the CLI
framework), so both print the same bytes. Only the standard library.
"""

from __future__ import annotations

import json
import os
import sys

from marchdb.hints import hint_line, recall_block
from marchdb.text import ACTS_ON_TERMINAL, escaped


def terminal(text: str) -> str:
    """``text`` safe to print: control characters other than newlines and
    tabs (an escape sequence in a memory's name, which would clear the
    screen or retitle the window) shown escaped (``\\x1b``)."""
    return escaped(text, keep=" \n\t")


def as_json(data: dict) -> str:
    """``--json``: exactly one JSON object, on one line. JSON escapes C0
    controls itself; DEL, C1 controls, direction controls and lone
    surrogates are written as ``\\uXXXX`` too, so the text is safe on a
    terminal and still valid JSON."""
    text = json.dumps(data, ensure_ascii=False, default=str)
    return ACTS_ON_TERMINAL.sub(lambda m: f"\\u{ord(m.group()):04x}", text) + "\n"


def notices(data: dict) -> str:
    """The ``notices`` and the ``warning`` of an answer, for stderr."""
    notes = "".join(f"note: {note}\n" for note in data.get("notices", []))
    return notes + (f"warning: {data['warning']}\n" if data.get("warning") else "")


def recall(data: dict, explain: bool) -> tuple[str, str]:
    """``marchdb recall``'s text: ``(stdout, stderr)``."""
    err = notices(data)
    if data["hints"]:
        out = [recall_block(data["text"]).rstrip("\n")]
    elif data.get("recorded"):  # record-only: what passed, logged for the run, shown to nobody
        out = ["recorded for this run, not injected:"]
        out += [hint_line(h["id"], h["score"], h["name"]) for h in data["recorded"]]
    else:
        out = [f"no hint at threshold {data['threshold']:.2f}"]
    if data.get("display"):
        out.append("[display]")
        out += [hint_line(h["id"], h["score"], h["name"]) for h in data["display"]]
    if explain and data.get("settings"):
        st = data["settings"]
        out.append(
            f"\nsettings: threshold {st['threshold']:.2f} ({st['threshold_from']}), "
            f"dense share {st['dense_weight']:.2f} ({st['dense_weight_from']})"
        )
        project = st.get("project")
        if project:
            if project["apart"]:
                what = f"kept apart, only memories tagged {project['tag']}" + (
                    " or no project" if project["untagged"] else ""
                )
            else:
                what = f"memories tagged {project['tag']} rank higher"
            out.append(f"project {project['name']}: {what} ({project['from']})")
    if explain:
        out.append(
            f"\ncandidates ({data['mode']}; dense = calibrated cosine, alone = the stricter curve used when no "
            "query word matches, bm25 = share of the query matched):"
        )
        out.append(
            "(temp = ranking adjustment from recency, use and priority: it reorders candidates, the threshold "
            "reads the score)"
        )
        out.append(
            f"{'score':>6} {'dense':>6} {'alone':>6} {'cos':>6} {'bm25':>6} {'raw':>7} {'temp':>6}  id / why cut"
        )
        for c in data["candidates"][:25]:
            sig = c["signals"]
            out.append(
                f"{c['score']:6.3f} {_f(sig.get('dense'))} {_f(sig.get('dense_alone'))} {_f(sig.get('dense_cos'))} "
                f"{_f(sig.get('bm25'))} {_f(sig.get('bm25_raw'), 7, 2)} {_f(sig.get('temp_adj'), 6, 3, sign=True)}  "
                f"{c['id']}  {c['reason'] or 'HINT'}"
                + (f" (ranked +{sig['project_bonus']:.2f}: project tag)" if sig.get("project_bonus") else "")
                + (f" (ranked as {sig['rank_score']:.3f})" if "rank_score" in sig else "")
                + (f" (raw {sig['xbm25_raw']:.2f} in words put into its language)" if "xbm25_raw" in sig else "")
            )
            passage = sig.get("passage")
            if isinstance(passage, dict) and passage.get("text"):
                who = f"{passage['role']}'s turn" if passage.get("role") else "passage"
                out.append(f"{'':>46}{who} {passage.get('seq')}: {escaped(str(passage['text']))}")
    return "\n".join(out) + "\n", err


def context(data: dict) -> tuple[str, str]:
    """``marchdb context``'s text: ``(stdout, stderr)``."""
    return data["text"], notices(data)


def _f(value, width: int = 6, digits: int = 3, sign: bool = False) -> str:
    if not isinstance(value, (int, float)):
        return " " * (width - 1) + "-"
    return f"{value:+{width}.{digits}f}" if sign else f"{value:{width}.{digits}f}"


def quiet_stdout() -> None:
    """Point stdout at /dev/null, so what is still buffered for a reader that
    went away is dropped quietly at exit."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
