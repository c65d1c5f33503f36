"""The docs say what the code does: every command, option, setting and environment
variable is documented, every link leads somewhere, the README stays short."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from typer.main import get_command

from marchdb import ops
from marchdb.cli.main import app
from marchdb.config import CONFIG_KEYS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
CLI_PAGE = (DOCS / "cli.md").read_text(encoding="utf-8")
CONFIG_PAGE = (DOCS / "configuration.md").read_text(encoding="utf-8")


def commands(group: click.Group, prefix: str = "marchdb") -> list[tuple[str, click.Command]]:
    out = []
    for name, command in sorted(group.commands.items()):  # type: ignore[attr-defined]
        path = f"{prefix} {name}"
        if isinstance(command, click.Group):
            out += commands(command, path)
        else:
            out.append((path, command))
    return out


ALL = commands(get_command(app))  # type: ignore[arg-type]


@pytest.mark.parametrize("path,command", ALL, ids=[p for p, _ in ALL])
def test_every_command_and_option_is_in_the_cli_page(path, command):
    assert f"`{path}" in CLI_PAGE, f"{path} is not in docs/cli.md"
    for param in command.params:
        if isinstance(param, click.Option):
            longest = max(param.opts, key=len)
            assert longest in CLI_PAGE or longest == "--help", f"{path} {longest} is not in docs/cli.md"


@pytest.mark.parametrize("key", CONFIG_KEYS)
def test_every_config_key_is_in_the_configuration_page(key):
    assert f"`{key}`" in CONFIG_PAGE


def test_every_environment_variable_the_code_reads_is_documented():
    names = set()
    for path in (ROOT / "marchdb").rglob("*.py"):
        names |= set(re.findall(r"[\"'](MARCH_[A-Z_]+|MARCHDB_[A-Z_]+)[\"']", path.read_text(encoding="utf-8")))
    documented = CONFIG_PAGE + CLI_PAGE + (DOCS / "engine.md").read_text(encoding="utf-8")
    missing = sorted(n for n in names if n not in documented)
    assert not missing, f"environment variables not in docs/configuration.md: {missing}"


AGENT_OPS = [op for op in ops.OPERATIONS.values() if op.mcp or op.prompt]


@pytest.mark.parametrize("op", AGENT_OPS, ids=[op.name for op in AGENT_OPS])
def test_every_mcp_tool_and_prompt_is_in_the_mcp_page_and_the_readme(op):
    page = (DOCS / "hosts" / "mcp.md").read_text(encoding="utf-8")
    row = next((line for line in page.splitlines() if line.startswith(f"| `{op.name}` |")), None)
    assert row is not None, f"{op.name} has no row in docs/hosts/mcp.md"
    for p in op.params:
        if p.mcp:
            assert f"`{p.name}`" in row, f"{op.name}'s {p.name} is not in its row of docs/hosts/mcp.md"
    assert f"`{op.name}`" in (ROOT / "README.md").read_text(encoding="utf-8"), f"{op.name} is not in the README"


def _pages() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.rglob("*.md"))]


def _anchors(text: str) -> set[str]:
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        out.add(slug)
    return out


def test_every_link_between_the_pages_leads_somewhere():
    broken = []
    for page in _pages():
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest.read_text(encoding="utf-8")):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_is_a_short_page_for_users():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    # What the page starts with: the two commands, before anything else.
    blocks = re.findall(r"```sh\n(.*?)\n```", text, re.S)[:2]
    assert blocks == [
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/marchdb demo",
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test]' && .venv/bin/pytest",
    ]
    assert text.index("```sh") < text.index("## ")
    # No dated measurement diary: figures live in docs/benchmarks.md, history in CHANGELOG.md.
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text)


def test_every_module_path_named_in_code_sql_and_docs_exists():
    # Comments and docs pointed at marchdb/recall.py, marchdb/vecindex.py... long after
    # those modules moved into their folders: a reader followed them to nothing.
    named: dict[str, set[str]] = {}
    sources = [*ROOT.joinpath("marchdb").rglob("*.py"), *ROOT.joinpath("sql").glob("*.sql")]
    sources += [*ROOT.joinpath("tools").glob("*.py"), *ROOT.joinpath("docs").rglob("*.md"), ROOT / "README.md"]
    for path in sources:
        for found in re.findall(r"\bmarchdb/[a-z_/]+\.py\b", path.read_text(encoding="utf-8")):
            named.setdefault(found, set()).add(str(path.relative_to(ROOT)))
    missing = {p: sorted(where) for p, where in named.items() if not (ROOT / p).is_file()}
    assert not missing, missing


def test_every_file_and_folder_the_architecture_page_names_exists():
    # The map is read to find things: a path on it that leads nowhere sends a newcomer astray.
    page = (DOCS / "architecture.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([\w.…/-]+(?:\.(?:py|sql|md|js|toml)|/|\.ci/run))`", page))
    named |= set(re.findall(r"`(\.ci/\w+)`", page))
    named |= set(re.findall(r"\b((?:marchdb|sql|tests|tools|docs)/[\w./-]*\w(?:/)?)", page))
    missing = []
    for path in sorted(named):
        if "NAME" in path or "…" in path or path.startswith("YYYY"):
            continue  # a pattern for a file to come, not a file
        bare = "/" not in path.rstrip("/")
        found = (
            (ROOT / path).exists()
            or (ROOT / "marchdb" / path).exists()
            or (DOCS / path).exists()
            or (bare and any(ROOT.joinpath("marchdb").rglob(path.rstrip("/"))))
        )
        if not found:
            missing.append(path)
    assert not missing, missing
    assert len(named) > 60  # the page names its files; a pattern that matches none would pass


def test_every_error_class_is_exported_as_the_api_page_says():
    import marchdb
    from marchdb import errors

    family = {
        name
        for name, value in vars(errors).items()
        if isinstance(value, type) and issubclass(value, errors.MarchError) and value.__module__ == errors.__name__
    }
    assert family <= set(marchdb.__all__), sorted(family - set(marchdb.__all__))
    for name in family:
        assert getattr(marchdb, name) is getattr(errors, name)
    page = (DOCS / "python-api.md").read_text(encoding="utf-8")
    assert [n for n in sorted(family) if n not in page] == []


#: The commands that speak a protocol of their own instead of printing an answer.
OWN_PROTOCOL = {"marchdb hook", "marchdb mcp", "marchdb browse"}


@pytest.mark.parametrize(("path", "command"), ALL, ids=[p for p, _ in ALL])
def test_every_command_takes_json_as_the_cli_page_promises(path, command):
    # `marchdb tools --json` and `marchdb call --json` were refused (exit 2) though the page promised it.
    if path in OWN_PROTOCOL or hasattr(command, "commands"):
        pytest.skip("speaks its own protocol, or is a group of commands")
    flags = {opt for p in command.params for opt in getattr(p, "opts", [])}
    assert "--json" in flags


#: Names of the project's own working papers: a user or an agent cannot look them up.
INTERNAL = re.compile(r"\b(seeds? ?0\d\d|issue \d+|the README, section)", re.IGNORECASE)


def _user_facing_strings(path: Path) -> list[tuple[int, str]]:
    """The string constants of a module that reach people or agents: every one
    but docstrings (help texts, tool descriptions, warnings, text for a model)."""
    import ast

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_what_users_and_agents_read_names_no_internal_papers():
    # MCP tool descriptions, the reflection text handed to a model, a search warning and
    # the docs said "seed 003's routing", "issue 33", which no reader can look up.
    found = []
    for page in [ROOT / "README.md", ROOT / "CHANGELOG.md", *DOCS.rglob("*.md"), *ROOT.joinpath("sql").glob("*.sql")]:
        found += [
            f"{page.relative_to(ROOT)}: {m.group(0)}" for m in INTERNAL.finditer(page.read_text(encoding="utf-8"))
        ]
    for module in ROOT.joinpath("marchdb").rglob("*.py"):
        for line, text in _user_facing_strings(module):
            found += [f"{module.relative_to(ROOT)}:{line}: {m.group(0)}" for m in INTERNAL.finditer(text)]
    assert not found, found


def test_every_host_of_the_registry_has_its_page_its_row_and_its_readme_line():
    from marchdb.hosts import HOSTS, adapter

    table = (DOCS / "hosts" / "README.md").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for host in HOSTS:
        page = adapter(host).DOCS
        assert (DOCS / "hosts" / page).is_file(), f"{host}: docs/hosts/{page} is missing"
        assert f"]({page})" in table, f"{host} has no row in docs/hosts/README.md"
        assert f"(docs/hosts/{page})" in readme, f"{host} is not in the README's host section"
