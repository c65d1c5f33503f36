"""What never leaves a file for the index, a hint or a prompt: secrets, and ``<private>`` regions.

Secrets. ``redact(text)`` finds what looks like a credential and puts a
marker in its place that says what was removed::

    >>> redact("DB_PASSWORD=Tr0ub4dor&3 psql")[0]
    'DB_PASSWORD=[redacted: password] psql'

This is the interface other modules build on (every write path of the
store, the importers, the sync that indexes hand-written files, the hooks'
queries, the logs); it stays as it is:

* ``redact(text, marker=marker) -> (text, findings)``: the text with each
  finding replaced by ``marker(kind)``, and the findings, in order;
* ``find(text) -> list[Finding]``: the findings alone, never overlapping,
  in order; ``Finding(kind, start, end)`` is a span of the text given;
* ``marker(kind) -> "[redacted: KIND]"``; ``MARKER_PREFIX`` starts every one;
* ``summary(findings) -> "2 github tokens, 1 password"``;
* ``redact_fields(values) -> (values, said)``: every text of a dict of
  fields (strings, lists and mappings of them, nested) redacted, and one
  line a field that held secrets (``"the body held 1 github token"``);
* ``KINDS``: every kind a finding can have.

What is caught: provider key formats (GitHub, GitLab, OpenAI, Anthropic and
other ``sk-`` keys, AWS access key ids, Slack, Stripe, Google, npm, PyPI,
Hugging Face, SendGrid, Telegram, Discord webhooks, Groq, xAI, Perplexity,
Replicate, Tavily, DigitalOcean, Shopify, Databricks, Linear, Notion), JWTs,
PEM private key blocks, ``Bearer`` tokens, the password of a connection
string (``postgres://app:PASSWORD@db``), and values assigned to a
secret-like name (``password=``, ``DB_PASSWORD:``, ``"api_key": "..."``,
``token =``, ``密码：``) when the value looks like one: a password that is
no plain word, a token or key that looks random. Placeholders
(``<password>``, ``${DB_PASSWORD}``, ``os.environ[...]``, ``********``,
``changeme`` aside) and code that names a secret without holding one are left
alone. What is not caught: a secret with no recognisable format and no
secret-like name beside it (a random string alone, a password written as a
plain word), and secrets split across lines. ``docs/privacy.md`` says so
for users.

Private regions. ``<private> ... </private>`` marks text the user keeps for
themselves: ``private_spans`` finds the regions (an unclosed one runs to
the end), ``without_private`` removes them. The file keeps them; the index,
the vectors and recall never see them.

Only the standard library; the patterns are compiled on first use. About
25 MB of text a second on one core here: the whole 9 MB of the shared
benchmark vaults in about 0.35 s (``tools/bench_redact.py``).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "KINDS",
    "MARKER_PREFIX",
    "Finding",
    "find",
    "has_private",
    "marker",
    "private_spans",
    "redact",
    "redact_fields",
    "summary",
    "without_private",
]


class Finding(NamedTuple):
    """A secret found in a text: its ``kind`` (``"github token"``) and its span ``text[start:end]``."""

    kind: str
    start: int
    end: int


#: What every marker starts with (``marker``).
MARKER_PREFIX = "[redacted: "


def marker(kind: str) -> str:
    """The text that stands where a secret of ``kind`` was: ``[redacted: github token]``."""
    return f"{MARKER_PREFIX}{kind}]"


def blank(kind: str) -> str:
    """A ``marker`` for text that is only matched, never shown (a query): a
    space, so the secret's place adds no words of its own."""
    return " "


# ---------------------------------------------------------------- what a secret looks like


def _entropy(value: str) -> float:
    """Shannon entropy of ``value`` in bits a character."""
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")


def random_like(value: str, min_len: int = 16) -> bool:
    """Whether ``value`` looks machine-made (a key, a token): long enough,
    letters and digits mixed, a long run without separators, and varied.
    ``sk-learn-tutorial-for-beginners-2024`` is not; ``5f4dcc3b5aa765d61d83`` is."""
    if len(value) < min_len:
        return False
    if not any(c.isdigit() for c in value) or not any(c.isalpha() for c in value):
        return False
    if max((len(m) for m in _ALNUM_RUN.findall(value)), default=0) < 12:
        return False
    if re.fullmatch(r"(.)\1*", value) or "xxxx" in value.lower() or "0000000" in value:
        return False  # a placeholder: ghp_xxxx..., sk-000000...
    return _entropy(value) >= 3.0


#: (kind, pattern, group to redact, check): what the span must also be,
#: ``random`` (``random_like``: a prefix others use too, ``sk-``), ``plausible``
#: (``plausible``: a provider's own prefix, but no placeholder) or "".
#: Kinds say what a person would call it; the formats are the providers'
#: own. Every pattern starts with a literal, which the regex engine scans
#: for at memory speed (a pattern opening with ``\\b`` or a class is tried
#: at every position, 20 times slower); the word boundary before a token is
#: checked on each match instead (``_extend``).
_FORMATS: list[tuple[str, str, int, str]] = [
    (
        "private key",
        r"-----BEGIN[A-Z0-9 ]{0,30}PRIVATE KEY(?: BLOCK)?-----(?:.{0,20000}?-----END[A-Z0-9 ]{0,30}PRIVATE KEY"
        r"(?: BLOCK)?-----|.{0,20000})",
        0,
        "",
    ),
    ("github token", r"gh[pousr]_[A-Za-z0-9]{36,251}(?![A-Za-z0-9_])", 0, "plausible"),
    ("github token", r"github_pat_[A-Za-z0-9_]{50,240}(?![A-Za-z0-9_])", 0, "plausible"),
    ("gitlab token", r"gl(?:pat|ptt|dt|rt|soat|cbt|ft|imt)-[A-Za-z0-9_-]{20,}", 0, "plausible"),
    ("openai key", r"sk-[A-Za-z0-9]{20}T3BlbkFJ[A-Za-z0-9]{20}(?![A-Za-z0-9])", 0, ""),
    ("anthropic key", r"sk-ant-[a-z]{2,10}\d{0,3}-[A-Za-z0-9_-]{32,}", 0, "plausible"),
    ("openai key", r"sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{32,}", 0, "plausible"),
    ("api key", r"sk-[A-Za-z0-9_-]{24,}", 0, "random"),
    ("aws access key", r"A(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])[A-Z0-9]{16}(?![A-Za-z0-9])", 0, ""),
    ("slack token", r"xox[abposre]-(?:[0-9]+-)*[A-Za-z0-9-]{10,}", 0, ""),
    ("slack token", r"xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]{20,}", 0, ""),
    ("slack webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/+-]{20,}", 0, ""),
    ("stripe key", r"sk_(?:live|test)_[A-Za-z0-9]{20,}", 0, "plausible"),
    ("stripe key", r"rk_(?:live|test)_[A-Za-z0-9]{20,}", 0, "plausible"),
    ("stripe key", r"whsec_[A-Za-z0-9]{24,}", 0, "plausible"),
    ("google api key", r"AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])", 0, ""),
    ("google oauth secret", r"GOCSPX-[A-Za-z0-9_-]{28}", 0, ""),
    ("google access token", r"ya29\.[A-Za-z0-9_-]{30,}", 0, ""),
    ("npm token", r"npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])", 0, "plausible"),
    ("pypi token", r"pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}", 0, ""),
    ("hugging face token", r"hf_[A-Za-z0-9]{30,40}(?![A-Za-z0-9])", 0, "plausible"),
    ("sendgrid key", r"SG\.[A-Za-z0-9_-]{22}\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])", 0, ""),
    # the bot's id (8 to 10 digits) before the colon is found by ``_extend``
    ("telegram bot token", r":AA[A-Za-z0-9_-]{33}(?![A-Za-z0-9_-])", 0, ""),
    (
        "discord webhook",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/\d+/[A-Za-z0-9_-]{60,}",
        0,
        "",
    ),
    ("groq key", r"gsk_[A-Za-z0-9]{48,}", 0, "plausible"),
    ("xai key", r"xai-[A-Za-z0-9]{60,}", 0, "plausible"),
    ("perplexity key", r"pplx-[A-Za-z0-9]{40,}", 0, "plausible"),
    ("replicate token", r"r8_[A-Za-z0-9]{37}(?![A-Za-z0-9])", 0, "plausible"),
    ("tavily key", r"tvly-(?:dev-|prod-)?[A-Za-z0-9]{28,}", 0, "plausible"),
    ("digitalocean token", r"do[pore]_v1_[a-f0-9]{64}(?![A-Za-z0-9])", 0, ""),
    ("shopify token", r"shp(?:at|ss|ca|pa)_[a-fA-F0-9]{32}(?![A-Za-z0-9])", 0, ""),
    ("databricks token", r"dapi[a-f0-9]{32}(?:-\d)?(?![A-Za-z0-9])", 0, "plausible"),
    ("linear key", r"lin_(?:api|oauth)_[A-Za-z0-9]{40}(?![A-Za-z0-9])", 0, "plausible"),
    ("notion token", r"secret_[A-Za-z0-9]{43,46}(?![A-Za-z0-9])", 0, "random"),
    ("notion token", r"ntn_[A-Za-z0-9]{43,46}(?![A-Za-z0-9])", 0, "random"),
    ("jwt", r"eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{10,}", 0, ""),
    ("bearer token", r"earer[ \t]+([A-Za-z0-9._~+/-]{20,}=*)", 1, "random"),
    # of a connection string, scheme://user:PASSWORD@host (the scheme is checked by ``_extend``)
    ("password", r"://[^\s:/@?#\"'<>]{1,100}:([^\s@/?#\"'<>]{1,200})@[A-Za-z0-9.\[_-]", 1, ""),
]
#: Text a format needs before its pattern is worth running (``_gate``): a
#: token is a run of at least ``_RUN`` letters, digits, '_' or '-'; the others
#: have a literal of their own.
_GATES = {"private key": "PRIVATE KEY", "jwt": "eyJ", "bearer token": "earer", "password": "://"}
_GATES.update({k: "://" for k in ("slack webhook", "discord webhook")})
_RUN = b"a" * 20
_RUN_TABLE = bytes(0x61 if chr(c).isascii() and (chr(c).isalnum() or chr(c) in "_-") else 0x20 for c in range(256))


def _has_token_run(text: str) -> bool:
    """Whether ``text`` holds ``_RUN`` token characters in a row (a C-speed
    test: three passes of bytes, about 200 MB/s in all)."""
    return _RUN in text.encode("utf-8", "surrogatepass").translate(_RUN_TABLE)


def plausible(value: str) -> bool:
    """Whether ``value``, in a provider's format, may be a real one and not a
    placeholder (``ghp_xxxx…``, ``sk-ant-…-your-key-here``)."""
    low = value.lower()
    if any(p in low for p in ("xxxx", "0000000", "1234567890", "abcdefghij", "your", "example", "redacted")):
        return False
    return _entropy(value) >= 3.0


_TOKEN_CHAR = re.compile(r"[A-Za-z0-9_]")


def _extend(kind: str, text: str, m: re.Match) -> int | None:
    """Where a format's match really starts, or None when what precedes it
    makes it no token: a letter before ``ghp_`` (it is part of a longer
    word), no bot id before a Telegram token, no scheme before ``://``."""
    start = m.start()
    before = text[start - 1] if start else ""
    if kind == "telegram bot token":
        digits = start
        while digits > 0 and start - digits < 10 and text[digits - 1].isdigit():
            digits -= 1
        ok = start - digits >= 8 and not (digits and _TOKEN_CHAR.match(text[digits - 1]))
        return digits if ok else None
    if kind == "bearer token":
        return start if before in "Bb" and not (start > 1 and _TOKEN_CHAR.match(text[start - 2])) else None
    if kind == "password":
        scheme = start
        while scheme > 0 and start - scheme < 30 and (text[scheme - 1].isalnum() or text[scheme - 1] in "+.-"):
            scheme -= 1
        return start if start - scheme >= 2 and text[scheme].isalpha() else None
    return None if before and _TOKEN_CHAR.match(before) else start


#: Words that, ending a name, make what is assigned to it a secret: ``DB_PASSWORD``, ``apiKey``, ``密码``.
_PASSWORD_WORDS = ("password", "passwd", "passphrase", "pwd", "密码", "口令")
_SECRET_WORDS = (
    "secret",
    "token",
    "apikey",
    "secretkey",
    "accesskey",
    "privatekey",
    "accountkey",
    "signingkey",
    "encryptionkey",
    "masterkey",
    "authkey",
    "credential",
    "credentials",
    "密钥",
    "令牌",
)
#: Names that end in a secret word and hold none: ``token_type``-like names
#: end elsewhere and never match; these end right on one.
_NOT_SECRET_NAMES = frozenset({"csrftoken", "nexttoken", "pagetoken", "continuationtoken", "cursortoken"})

#: A secret word ending a name (the name's start is found by walking back),
#: a closing quote of a quoted name, the assignment, and the value: quoted,
#: or up to a space or a delimiter. One pattern a word, each opening with
#: its literal, run over the text in lower case.
_ASSIGN_WORDS = ("pass", "pwd", "secret", "token", "key", "credential", "密码", "口令", "密钥", "令牌")
_ASSIGN_TAIL = (
    r"(?![a-z0-9_])[\"']?[ \t]{0,3}(:=|=>|=|:|：|是|为|[ \t](?:is|was)[ \t])[ \t]{0,3}"
    r"(\"[^\"\n]{1,300}\"|'[^'\n]{1,300}'|`[^`\n]{1,300}`|[^\s\"'`,;)}\]<>，。；）、]{1,300})"
)
_ASSIGN_HEADS = {"pass": "pass(?:word|wd|phrase)", "credential": "credentials?"}


class _Patterns:
    """The compiled patterns, made on first use (10 to 30 ms): a process that
    imports this module and redacts nothing (a hook, most commands) never
    pays for them."""

    #: The token formats (no gate of their own), and each gate's formats.
    formats: list[tuple[str, re.Pattern, int, str]] = []
    gated: dict[str, list[tuple[str, re.Pattern, int, str]]] = {}
    assignments: list[tuple[re.Pattern, re.Pattern]] = []

    @classmethod
    def ready(cls) -> type[_Patterns]:
        if not cls.assignments:
            cls.assignments = [
                (
                    re.compile(f"({_ASSIGN_HEADS.get(w, w)}){_ASSIGN_TAIL}"),
                    re.compile(f"(?i)({_ASSIGN_HEADS.get(w, w)}){_ASSIGN_TAIL}"),
                )
                for w in _ASSIGN_WORDS
            ]
            for kind, p, group, check in _FORMATS:
                compiled = (kind, re.compile(p, re.S), group, check)
                gate = _GATES.get(kind)
                (cls.gated.setdefault(gate, []) if gate else cls.formats).append(compiled)
        return cls


_NAME_CHAR = re.compile(r"[A-Za-z0-9_.-]")

#: Values that stand for a secret without being one.
_PLACEHOLDERS = frozenset(
    {
        "password",
        "passwd",
        "secret",
        "token",
        "apikey",
        "api_key",
        "none",
        "null",
        "nil",
        "undefined",
        "true",
        "false",
        "empty",
        "required",
        "optional",
        "string",
        "str",
        "bytes",
        "int",
        "bool",
        "any",
        "example",
        "placeholder",
        "redacted",
        "hidden",
        "secretstr",
        "yourpassword",
        "your_password",
        "your-password",
        "mypassword",
        "your_token",
        "your-token",
        "your_api_key",
        "your-api-key",
    }
)
_CODE_VALUE = re.compile(
    r"^(?:[$%@&*]|\.{2,}|<|\{\{|#\{|\[redacted)"  # ${VAR}, %(x)s, @var, &ref, *ptr, ..., <your key>, {{ x }}
    r"|[()\[\]{}]"  # a call, an index, a literal: os.environ["X"], get_token(), {...}
    r"|^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+$"  # settings.password, self.token
    r"|^[A-Za-z_][A-Za-z_]*_[A-Za-z_]*$"  # DB_PASSWORD, user_password, get_token (no digit)
    r"|^(?:process\.env|os\.environ|env)\b",
    re.I,
)
_MASKED = re.compile(r"^[x*•·#._\-]+$", re.I)


def _name_before(text: str, end: int) -> str:
    """The name (an identifier, possibly quoted) ending at ``end``."""
    start = end
    while start > 0 and end - start < 60 and _NAME_CHAR.match(text[start - 1]):
        start -= 1
    return text[start:end]


def _assigned_kind(name: str) -> str | None:
    """``password`` or ``secret`` for a name a secret is assigned to, None for another name."""
    flat = re.sub(r"[_.\-]", "", name.lower())
    if flat in _NOT_SECRET_NAMES:
        return None
    if flat.endswith(_PASSWORD_WORDS):
        return "password"
    if flat.endswith(_SECRET_WORDS):
        return "secret"
    return None


def _holds_secret(kind: str, value: str, quoted: bool, sep: str) -> bool:
    """Whether ``value``, assigned to a name of ``kind``, is a secret rather than
    a placeholder, a type, a variable or a word of prose."""
    if not value or value.isspace() or _MASKED.match(value) or value.lower() in _PLACEHOLDERS:
        return False
    if _CODE_VALUE.search(value) and not (quoted and kind == "password" and value[0] not in "$%<{#["):
        return False
    if not any(c.isascii() and c.isalnum() for c in value):
        return False  # 密码：无 — words of another script
    if kind == "secret":
        return random_like(value, 12) or (quoted and random_like(value, 8))
    # A password: in prose ("password: required", "the password is correct")
    # a word; a password has a digit, a symbol or a capital inside, or quotes.
    if len(value) < 4 or value.isdigit() and len(value) < 6:
        return False
    mixed = any(c.isdigit() for c in value) or any(not c.isalnum() for c in value) or value[1:] != value[1:].lower()
    if sep.strip() in ("is", "was", "是", "为"):
        return mixed and any(c.isalpha() for c in value) and (any(c.isdigit() for c in value) or len(value) >= 8)
    return quoted or mixed


def _assignments(text: str) -> list[Finding]:
    low = text.lower()
    same = len(low) == len(text)  # a few characters lower to two ("İ"): then the text itself, ignoring case
    found = []
    for word, (lowered, any_case) in zip(_ASSIGN_WORDS, _Patterns.ready().assignments):
        if same and word not in low:
            continue  # each lowered pattern starts with its word, and a substring test costs less than a search
        for m in lowered.finditer(low) if same else any_case.finditer(text):
            head = m.group(1)
            name = head if not head.isascii() else _name_before(text, m.end(1))
            kind = _assigned_kind(name)
            if kind is None:
                continue
            start, end = m.start(3), m.end(3)
            raw = text[start:end]
            quoted = raw[0] in "\"'`" and raw[-1] == raw[0] and len(raw) >= 2
            value = raw[1:-1] if quoted else raw.rstrip(".")
            if quoted:
                start, end = start + 1, end - 1
            else:
                end = start + len(value)
                for mark in ("**", "__", "*", "_"):  # Markdown emphasis around the value
                    if len(value) > 2 * len(mark) and value.startswith(mark) and value.endswith(mark):
                        value, start, end = value[len(mark) : -len(mark)], start + len(mark), end - len(mark)
                        break
            if _holds_secret(kind, value, quoted, m.group(2)):
                found.append(Finding(kind, start, end))
    return found


def find(text: str) -> list[Finding]:
    """The secrets in ``text``, in order, none overlapping (where two rules
    meet one span, the format wins over the name it is assigned to)."""
    if not text:
        return []
    found: list[Finding] = []
    patterns = _Patterns.ready()
    wanted = [f for gate, formats in patterns.gated.items() if gate in text for f in formats]
    if _has_token_run(text):
        wanted += patterns.formats
    for kind, pattern, group, check in wanted:
        for m in pattern.finditer(text):
            span = m.group(group)
            start = _extend(kind, text, m)
            if start is None or span is None:
                continue
            if (check == "random" and not random_like(span, 16)) or (check == "plausible" and not plausible(span)):
                continue
            if kind == "password" and (
                _MASKED.match(span) or span.lower() in _PLACEHOLDERS or _CODE_VALUE.search(span)
            ):
                continue
            found.append(Finding(kind, start if group == 0 else m.start(group), m.end(group)))
    taken = sorted(found, key=lambda f: (f.start, -f.end))
    out: list[Finding] = []
    for f in taken + sorted(_assignments(text)):
        if not any(f.start < o.end and o.start < f.end for o in out):
            out.append(f)
    return sorted(out, key=lambda f: f.start)


def redact(text: str, marker: Callable[[str], str] = marker) -> tuple[str, list[Finding]]:
    """``text`` with every secret ``find`` sees replaced by ``marker(kind)``
    (``[redacted: github token]``), and the findings (spans of ``text`` as
    given). Text without secrets comes back as it is. Redacting twice
    changes nothing more."""
    findings = find(text)
    if not findings:
        return text, []
    parts, last = [], 0
    for f in findings:
        parts += [text[last : f.start], marker(f.kind)]
        last = f.end
    parts.append(text[last:])
    return "".join(parts), findings


def summary(findings: list[Finding]) -> str:
    """The findings counted by kind, for a person: ``"2 github tokens, 1 password"``."""
    counts = Counter(f.kind for f in findings)
    return ", ".join(f"{n} {kind}{'s' if n > 1 else ''}" for kind, n in counts.items())


def redact_fields(values: dict[str, object]) -> tuple[dict[str, object], list[str]]:
    """``values`` (a field's label: its value) with every text in them
    redacted (strings, and strings in lists and mappings, nested; other
    values as they are), and what was taken out: one line a field,
    ``"the body held 1 github token, 1 password"``. Mapping keys stay."""
    found: dict[str, list[Finding]] = {}

    def clean(label: str, value: object) -> object:
        if isinstance(value, str):
            text, findings = redact(value)
            found.setdefault(label, []).extend(findings)
            return text
        if isinstance(value, (list, tuple)):
            return type(value)(clean(label, v) for v in value)
        if isinstance(value, dict):
            return {k: clean(label, v) for k, v in value.items()}
        return value

    out = {label: clean(label, value) for label, value in values.items()}
    return out, [f"{label} held {summary(f)}" for label, f in found.items() if f]


#: Every kind a finding may have.
KINDS = tuple(dict.fromkeys([kind for kind, *_ in _FORMATS] + ["password", "secret"]))


# ---------------------------------------------------------------- <private> regions

_PRIVATE_OPEN = re.compile(r"<private>", re.I)
_PRIVATE_CLOSE = re.compile(r"</private>", re.I)


def has_private(text: str) -> bool:
    """Whether ``text`` holds a ``<private>`` region (a quick test)."""
    return "<" in text and "<private>" in text.lower()


def private_spans(text: str) -> list[tuple[int, int]]:
    """The ``<private> ... </private>`` regions of ``text``, tags included,
    as ``(start, end)``; one left open runs to the end of the text."""
    spans = []
    pos = 0
    while (m := _PRIVATE_OPEN.search(text, pos)) is not None:
        close = _PRIVATE_CLOSE.search(text, m.end())
        end = len(text) if close is None else close.end()
        spans.append((m.start(), end))
        pos = end
    return spans


def without_private(text: str) -> str:
    """``text`` without its ``<private>`` regions (each leaves a space, so the
    words around it stay apart)."""
    if not has_private(text):
        return text
    parts, last = [], 0
    for start, end in private_spans(text):
        parts += [text[last:start], " "]
        last = end
    parts.append(text[last:])
    return "".join(parts)
