"""Secrets found and replaced by markers (``redact``), and nothing else touched.

Every secret here is fabricated at run time from a seeded generator in the
provider's format (none is real, and none sits in the repository as a
literal a secret scanner would stop). The false-positive checks read real
text: prose, code, Chinese, marchdb's own source and docs, and the shared
benchmark vaults, which must come out without a single marker.
"""

from __future__ import annotations

import json
import os
import random
import string
from pathlib import Path

import pytest

from marchdb import redact

ROOT = Path(__file__).resolve().parent.parent
ALNUM = string.ascii_letters + string.digits
URLSAFE = ALNUM + "-_"


def _rand(rng: random.Random, n: int, alphabet: str = ALNUM) -> str:
    mixed = any(c.isdigit() for c in alphabet) and any(c.isalpha() for c in alphabet)
    for _ in range(1000):
        value = "".join(rng.choice(alphabet) for _ in range(n))
        # as a real one is: letters and digits both, and a long unbroken run
        if not mixed or n < 12 or redact.random_like(value, 12):
            return value
    raise AssertionError(f"no random-looking value of {n} from {alphabet!r}")


def fabricated() -> list[tuple[str, str, str]]:
    """(kind, secret, the sentence it sits in) for every format, made up."""
    rng = random.Random(42)
    r = lambda n, a=ALNUM: _rand(rng, n, a)  # noqa: E731
    upper = string.ascii_uppercase + string.digits
    hexa = "0123456789abcdef"
    jwt = "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI" + r(30) + "." + r(43, URLSAFE)
    pem = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(r(70) for _ in range(4))
        + "\n-----END OPENSSH PRIVATE KEY-----"
    )
    cases = [
        ("github token", "ghp_" + r(36), "push with {} from the laptop"),
        ("github token", "github_pat_11" + r(20) + "_" + r(59), "fine-grained: {}"),
        ("gitlab token", "glpat-" + r(20), "GITLAB_TOKEN={}"),
        ("openai key", "sk-proj-" + r(100, URLSAFE), "the key is {} (project key)"),
        ("openai key", "sk-" + r(20) + "T3BlbkFJ" + r(20), "old style {}"),
        ("anthropic key", "sk-ant-api03-" + r(93, URLSAFE) + "AA", "ANTHROPIC_API_KEY={}"),
        ("api key", "sk-" + r(32, hexa), "deepseek key {} works"),
        ("aws access key", "AKIA" + _rand(rng, 16, upper), "aws_access_key_id = {}"),
        ("slack token", "xoxb-" + r(12, string.digits) + "-" + r(13, string.digits) + "-" + r(24), "bot {}"),
        ("slack webhook", "https://hooks.slack.com/services/T" + r(10) + "/B" + r(10) + "/" + r(24), "post to {}"),
        ("stripe key", "sk_live_" + r(24), "stripe {}"),
        ("google api key", "AIza" + r(35, URLSAFE), "maps key {}"),
        ("google oauth secret", "GOCSPX-" + r(28, URLSAFE), "client secret {}"),
        ("npm token", "npm_" + r(36), "//registry.npmjs.org/:_authToken={}"),
        ("pypi token", "pypi-AgEIcHlwaS5vcmc" + r(60, URLSAFE), "twine upload -p {}"),
        ("hugging face token", "hf_" + r(34), "HF_TOKEN={}"),
        ("sendgrid key", "SG." + r(22, URLSAFE) + "." + r(43, URLSAFE), "mail {}"),
        ("telegram bot token", r(10, string.digits).lstrip("0").rjust(10, "7") + ":AA" + r(33, URLSAFE), "bot {}"),
        ("groq key", "gsk_" + r(52), "groq {}"),
        ("jwt", jwt, "the session cookie was {} yesterday"),
        ("bearer token", r(40, URLSAFE), "curl -H 'Authorization: Bearer {}' https://api.example.com"),
        ("private key", pem, "my deploy key:\n{}\nkeep it safe"),
        ("password", "S3cr3t-" + r(6), "postgres://app:{}@db.internal:5432/app"),
        ("password", "hunter2", "password = {}"),
        ("password", "Tr0ub4dor&3", "DB_PASSWORD={}"),
        ("password", "Welcome1", "Password: **{}**"),
        ("password", "correct-horse-42", "my password is {}"),
        ("password", "abc12345", "服务器的密码：{}"),
        ("password", "qwerty2024", "wifi 密码是 {}，别告诉别人"),
        ("secret", r(32, hexa), '"api_key": "{}"'),
        ("secret", r(40, ALNUM + "/+"), "aws_secret_access_key = {}"),
        ("secret", r(24), "export CLIENT_SECRET={}"),
        ("secret", r(44, ALNUM + "/+") + "==", "AccountName=x;AccountKey={};EndpointSuffix=core.windows.net"),
    ]
    return [(kind, secret, sentence.format(secret)) for kind, secret, sentence in cases]


@pytest.mark.parametrize(
    "kind,secret,text", fabricated(), ids=lambda v: v if isinstance(v, str) and len(v) < 25 else ""
)
def test_each_kind_is_replaced_by_its_marker(kind, secret, text):
    out, findings = redact.redact(text)
    assert secret not in out
    assert redact.marker(kind) in out
    assert [f.kind for f in findings] == [kind]
    assert kind in redact.KINDS
    # the finding is a span of the text as given, and the rest is kept
    f = findings[0]
    assert secret in text[f.start : f.end] or text[f.start : f.end] in secret
    assert out == text[: f.start] + redact.marker(kind) + text[f.end :]


def test_redacting_twice_changes_nothing_more():
    text = "\n".join(t for _, _, t in fabricated())
    once, first = redact.redact(text)
    twice, second = redact.redact(once)
    assert twice == once and second == []
    assert len(first) == len(fabricated())


def test_several_secrets_in_one_text_in_order():
    cases = fabricated()
    text = " and ".join(t for _, _, t in cases[:6])
    out, findings = redact.redact(text)
    assert [f.kind for f in findings] == [k for k, _, _ in cases[:6]]
    assert findings == sorted(findings, key=lambda f: f.start)
    assert redact.summary(findings).startswith("2 github tokens, 1 gitlab token, 2 openai keys")


def test_a_marker_of_another_kind_can_be_asked_for():
    text = "token ghp_" + _rand(random.Random(1), 36)
    out, findings = redact.redact(text, marker=redact.blank)
    assert out == "token  " and findings[0].kind == "github token"


def test_an_unclosed_private_key_is_cut_to_the_end():
    text = "here:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq8gZ2\n(pasted only half)"
    assert redact.redact(text)[0] == "here:\n[redacted: private key]"


PROSE = """
We deploy on Tuesdays, never on Fridays. The password is required to log in, and the token expires
after an hour; rotate the secret key every month. Password: see the team vault. Token: the smallest
unit a tokenizer makes. The key to a good cache is ordering. My key insight was that the API key
should live in the keychain. I forgot my password again, so I reset it. Secret: keep it simple.
sk-learn-tutorial-for-beginners-2024 is a blog post. Use a passphrase of four words.
She said the password was correct. The AKIA prefix marks AWS access keys. ghp_ starts a GitHub token.
Reach me at anna@example.com or https://example.com/docs?key=value#section.
"""

CODE = """
import os
password = os.environ["DB_PASSWORD"]
token = get_token(user)
api_key: str = settings.api_key
secret = SECRET_KEY
self.password = password
if password == confirm_password:
    pass
headers = {"Authorization": f"Bearer {token}"}
DATABASE_URL = "postgres://user:password@localhost/db"
REDIS_URL = "redis://:${REDIS_PASSWORD}@cache:6379"
conn = psycopg.connect(f"postgresql://{user}:{pw}@{host}/db")
max_tokens: 4096
token_type: bearer
next_token = response["NextToken"]
PASSWORD_MIN_LENGTH = 12
password_hash = bcrypt.hashpw(password, salt)
const apiKey = process.env.OPENAI_API_KEY;
let token: Option<String> = None;
func login(password string) error {
secret: ${{ secrets.DEPLOY_KEY }}
password: <your password>
password: "********"
token: xxxxxxxxxxxxxxxxxxxxxxxx
api_key = "YOUR_API_KEY"
kubectl create secret generic db --from-literal=password=$DB_PASSWORD
gcloud secrets versions access latest --secret=$secret | base64
sha = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
commit 3f5e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f
uuid = "123e4567-e89b-12d3-a456-426614174000"
"""

CHINESE = """
密码学是研究编制密码和破译密码的技术科学。研究密码变化的客观规律，应用于编制密码以保守通信秘密的，称为编码学。
请输入密码：（六位数字）。忘记密码了怎么办？密码是什么意思。他的口令是"芝麻开门"。
令牌桶算法是网络流量整形中最常使用的一种算法。密钥管理是密码学中的重要问题。
"""


@pytest.mark.parametrize("text", [PROSE, CODE, CHINESE], ids=["prose", "code", "chinese"])
def test_ordinary_text_is_left_alone(text):
    assert redact.find(text) == []
    assert redact.redact(text) == (text, [])


def _texts_of_the_repository():
    for pattern in ("marchdb/**/*.py", "docs/**/*.md", "tools/**/*.py", "README.md", "CHANGELOG.md"):
        for path in sorted(ROOT.glob(pattern)):
            yield path, path.read_text(encoding="utf-8")


def test_marchdb_own_code_and_docs_hold_no_secret():
    texts = dict(_texts_of_the_repository())
    found = {str(p.relative_to(ROOT)): redact.find(t) for p, t in texts.items()}
    example = found.pop("marchdb/redact.py")  # its docstring shows a redaction
    assert [texts[ROOT / "marchdb/redact.py"][f.start : f.end] for f in example] == ["Tr0ub4dor&3"]
    assert {p: f for p, f in found.items() if f} == {}
    assert len(found) > 100


def _bench() -> Path | None:
    env = os.environ.get("MARCHDB_BENCH")
    if env:
        return Path(env)
    for parent in ROOT.parents:
        if (parent / "shared" / "bench").is_dir():
            return parent / "shared" / "bench"
    return None


def test_the_benchmark_vaults_lose_nothing():
    """Every text of the shared sets (memories and queries: 9 MB of chats,
    Chinese paragraphs, technical abstracts) and of our own query sets comes
    back as it was: no marker at all."""
    bench = _bench()
    if bench is None:
        pytest.skip("the shared benchmark sets are not beside this checkout (MARCHDB_BENCH names them)")
    markers, texts = 0, 0
    for path in sorted(bench.glob("*/*.jsonl")) + sorted((ROOT / "tools" / "data").rglob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if not line.strip():
                    continue
                row = json.loads(line)
                for key in ("name", "description", "body", "text"):
                    if isinstance(row.get(key), str):
                        texts += 1
                        markers += len(redact.find(row[key]))
    for path in sorted((ROOT / "tools" / "data").rglob("*.txt")):
        texts += 1
        markers += len(redact.find(path.read_text(encoding="utf-8")))
    assert texts > 10_000
    assert markers == 0


# ---------------------------------------------------------------- <private>


def test_private_regions_are_found_and_removed():
    text = "Deploy notes.\n<private>my salary is 120k</private>\nThen <PRIVATE>a</Private> and more."
    spans = redact.private_spans(text)
    assert [text[a:b] for a, b in spans] == ["<private>my salary is 120k</private>", "<PRIVATE>a</Private>"]
    out = redact.without_private(text)
    assert "salary" not in out and "<private>" not in out.lower()
    assert out.startswith("Deploy notes.") and out.endswith("and more.")


def test_an_unclosed_private_region_runs_to_the_end():
    text = "public part <private> the rest is mine\nand this line too"
    assert redact.without_private(text).strip() == "public part"
    assert redact.has_private(text) and not redact.has_private("public")


def test_a_secrets_marker_reaches_a_model_as_written_and_a_look_alike_does_not():
    # The one rule for what reaches a model showed [redacted: github token] as
    # ⟦redacted: github token⟧: the agent read a marker it was never told of.
    from marchdb.modeltext import for_model

    for kind in redact.KINDS:
        marker = redact.marker(kind)
        assert for_model(f"key {marker} here") == f"key {marker} here"
    assert for_model("[redacted: x] [user]") == "[redacted: x] ⟦user⟧"
    assert for_model("\u200b[redacted: x]") == "\u200b[redacted: x]"
    assert for_model("[red\u200bacted: x]") == "⟦redacted: x⟧"  # not as marchdb writes it
    assert for_model("［redacted: x］").startswith("⟦")
