"""The pages a newcomer reads: a README of one sitting that points to docs/ for the rest, links
that lead somewhere, and the README's one-line agent set-ups the same as the full ones in
docs/agents.md (which tests/e2e/test_coding_agents.py gives to the real agents)."""

from __future__ import annotations

import json
import re
import tomllib

from ..support import docs

AGENTS = docs.ROOT / "docs" / "agents.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page) -> set[str]:
    return {_slug(h) for h in re.findall(r"^#+ (.*)$", page.read_text("utf-8"), re.M)}


def test_the_readme_fits_one_sitting_and_names_every_page():
    text = docs.README.read_text("utf-8")
    assert len(text.splitlines()) <= 120
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert [h.split(" (")[0] for h in headings] == ["Set up", "A first chat", "Serve it to editors and coding agents",
                                                    "Read more"]
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)", text))
    assert linked == {p.name for p in docs.pages()[1:]}  # every page is reachable from the README


def test_every_link_between_the_pages_leads_somewhere():
    broken = []
    for page in docs.pages():
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text("utf-8")):
            if re.match(r"\w+:", target):
                continue  # a web address
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists() or (anchor and dest.suffix == ".md" and anchor not in _anchors(dest)):
                broken.append(f"{page.relative_to(docs.ROOT)}: {target}")
    assert broken == []


def test_the_readme_agent_lines_are_the_full_set_ups():
    readme = docs.README.read_text("utf-8")
    agents = AGENTS.read_text("utf-8")
    claude_line = re.search(r"\*\*Claude Code\*\*: `([^`]+)`", readme).group(1)
    block = agents[agents.index("**Claude Code**"):].split("```sh", 1)[1].split("```", 1)[0]
    full = dict(re.findall(r"(\w+)=(\S+)", block))
    assert dict(re.findall(r"(\w+)=(\S+)", claude_line)).items() <= full.items()

    toml = tomllib.loads(agents[agents.index("**Codex CLI**"):].split("```toml\n", 1)[1].split("```", 1)[0])
    codex = readme[readme.index("**Codex CLI**"):readme.index("**opencode**")]
    provider = toml["model_providers"][toml["model_provider"]]
    assert f'base_url = "{provider["base_url"]}"' in codex and f'wire_api = "{provider["wire_api"]}"' in codex
    assert f'{provider["env_key"]}=none codex' in codex

    config = json.loads(agents[agents.index("**opencode**"):].split("```json\n", 1)[1].split("```", 1)[0])
    opencode = readme[readme.index("**opencode**"):readme.index("**The OpenAI Agents SDK")]
    tandem = config["provider"]["tandem"]
    assert f'"npm": "{tandem["npm"]}"' in opencode and f'"baseURL": "{tandem["options"]["baseURL"]}"' in opencode
