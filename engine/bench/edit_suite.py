"""`tandem bench --suite edits`: what lookup drafting is for. Completion-style prompts (raw
text, so any model reads them, Gemma 3 270M included, whose PyPI file has no chat template):
a source file of 100-300 lines, then "the same file, with ..." — a rename, type hints, a
changed signature, a moved block — where most of the answer copies the file; and, as the
control, prose and an explanation of code, where little is copied.

The files are Tandem's own, frozen as they were when the suite was written
(resources/prompts/edit_files/: the engine's code changes, the benchmark's prompts must not),
so the suite needs nothing from outside and its numbers compare across versions.
"""

from __future__ import annotations

from importlib import resources

# the context the suite needs: a 170-line file twice and the answer (a small vocabulary, as the
# synthetic models' character-level one, makes that 9k tokens)
SUITE_CTX = 16384


def _source(path: str) -> str:
    name = path.rsplit("/", 1)[-1] + ".txt"
    return resources.files("resources").joinpath("prompts/edit_files", name).read_text(encoding="utf-8")


def _edit(path: str, change: str) -> dict:
    """The file, then the request, then the new file's first line: the answer starts copying
    (as a chat model's answer does once it has begun the file)."""
    code = _source(path)
    first = code.splitlines(keepends=True)[0]
    return {"prompt": f"Here is engine/{path}:\n\n```python\n{code}```\n\nHere is the same file, {change}:"
                      f"\n\n```python\n{first}", "raw": True, "kind": "edit"}


def edit_prompts() -> list[dict]:
    return [
        _edit("sampling.py", "with the class SamplingParams renamed to SamplerSettings everywhere"),
        _edit("strategies/speculative.py", "with type hints on every local variable"),
        _edit("api_reply.py", "with StopStrings.feed taking a list of pieces instead of one string"),
        _edit("stats.py", "with the footer method moved above k_label"),
        {"prompt": "The history of the bicycle begins in the early nineteenth century, when", "raw": True,
         "kind": "prose"},
        {"prompt": "Here is engine/strategies/lookup.py:\n\n```python\n" + _source("strategies/lookup.py")
                   + "```\n\nIn plain words, this code works as follows:", "raw": True, "kind": "explain"},
    ]


def edit_groups() -> dict[str, list[dict]]:
    """The suite as bench reports it: the code edits, then the control group."""
    prompts = edit_prompts()
    return {"code edits": [p for p in prompts if p["kind"] == "edit"],
            "prose and explaining code": [p for p in prompts if p["kind"] != "edit"]}
