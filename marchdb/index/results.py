"""What a recall returns: hints (never a body) and the result around them.

Data for every front-end alike: ``to_dict`` is what the CLI's ``--json``, the
MCP server, hooks and the engine's answers carry.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from marchdb.hints import contradiction_lines, hint_line


@dataclass
class Hint:
    """One recall hint: never the body, only what the seed's hint line shows."""

    id: str
    score: float
    name: str
    description: str
    path: str
    signals: dict = field(default_factory=dict)
    reason: str | None = None  # why it was cut (explain mode); None when kept

    @property
    def rank_score(self) -> float:
        """The key ``sql/recall.sql`` ranks by: the score, unless the
        candidate is ranked apart from it (a memory in the other script)."""
        return self.signals.get("rank_score", self.score)

    def line(self, with_description: bool = True) -> str:
        """The seed's hint line ``- <id> | score=0.62 | <name> | <short description>``."""
        return hint_line(self.id, self.score, self.name, self.description if with_description else "")

    def to_dict(self, with_reason: bool = False) -> dict:
        """JSON-ready form."""
        data = asdict(self)
        data["score"] = round(self.score, 4)
        data["signals"] = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.signals.items()}
        if not with_reason:
            data.pop("reason")
        return data


@dataclass
class RecallResult:
    """Hints to inject (in order), display-only candidates, what was recorded
    without injecting (``record_only``), and with explain every scored
    candidate with the reason it was cut."""

    trigger: str
    run_id: str | None
    threshold: float
    hints: list[Hint]
    display: list[Hint] = field(default_factory=list)
    candidates: list[Hint] = field(default_factory=list)
    recorded: list[Hint] = field(default_factory=list)
    mode: str = "hybrid"  # or "bm25" when no vectors can be used
    warning: str | None = None
    explained: bool = False
    #: With ``explain``: the settings the recall ran with and where each came from.
    settings: dict = field(default_factory=dict)

    def text(self) -> str:
        """The hints as seed 000's ``[recall]`` lines, one per hint, then a
        line for each undecided contradiction among them ("" for none)."""
        return "\n".join([h.line() for h in self.hints] + contradiction_lines(self.hints))

    def to_dict(self) -> dict:
        """The result as data, the same for every front-end: ``hints``,
        ``text`` (the hint lines), ``trigger``, ``run_id``, ``threshold``,
        ``mode``, ``warning``; ``display`` for the assistant trigger (no
        descriptions, seed 000), ``recorded`` when there were any, and
        ``candidates`` (each with its ``reason``) when explained."""
        data: dict = {
            "hints": [h.to_dict() for h in self.hints],
            "text": self.text(),
            "trigger": self.trigger,
            "run_id": self.run_id,
            "threshold": self.threshold,
            "mode": self.mode,
            "warning": self.warning,
        }
        if self.trigger == "assistant":
            data["display"] = [{"id": h.id, "score": round(h.score, 4), "name": h.name} for h in self.display]
        if self.recorded:
            data["recorded"] = [h.to_dict() for h in self.recorded]
        if self.explained:
            data["candidates"] = [h.to_dict(with_reason=True) for h in self.candidates]
            data["settings"] = self.settings
        return data
