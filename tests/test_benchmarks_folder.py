"""benchmarks/ holds only research scripts a document quotes: benchmarks/README.md lists every
one with what it measures and the documents that quote it, each script's docstring starts with
that same line, and each listed document does quote the script. A module that is not a script
(what several scripts share) is named in the README and imported by a script. The held-out
inputs are files the bench reads, and share nothing with the built-in sets."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from specchat.bench.prompts import categories_of, load_prompts
from specchat.bench.sessions import load_sessions

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "benchmarks"
ROW = re.compile(r"^\| `([^`]+)` \| (.+) \| ([^|]+) \|$")


def listed() -> dict[str, tuple[str, list[str]]]:
    """README rows: script -> (what it measures, the documents that quote it)."""
    rows = {}
    for line in (FOLDER / "README.md").read_text(encoding="utf-8").splitlines():
        match = ROW.match(line)
        if match:
            script, what, docs = match.groups()
            rows[script] = (what, [d.strip() for d in docs.split(",")])
    return rows


def runs(path: Path) -> bool:
    """A script is a shell script or a Python file that runs as one (`__main__`); the other
    Python files hold what several scripts share."""
    return path.suffix == ".sh" or 'if __name__ == "__main__":' in path.read_text("utf-8")


SCRIPTS = sorted(p.name for p in FOLDER.iterdir() if p.suffix in (".py", ".sh")
                 and p.name != "__init__.py" and runs(p))
SHARED = sorted(p.name for p in FOLDER.glob("*.py") if p.name != "__init__.py" and not runs(p))


def test_the_readme_lists_every_script_and_nothing_else() -> None:
    assert sorted(listed()) == SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_is_quoted_by_the_documents_listed(script: str) -> None:
    _, docs = listed()[script]
    for doc in docs:
        text = (REPO / doc).read_text(encoding="utf-8")
        assert f"benchmarks/{script}" in text, f"{doc} does not quote benchmarks/{script}"


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s.endswith(".py")])
def test_a_script_says_first_what_it_measures(script: str) -> None:
    what, docs = listed()[script]
    doc = ast.get_docstring(ast.parse((FOLDER / script).read_text(encoding="utf-8")))
    assert doc is not None, f"{script} has no docstring"
    first = doc.splitlines()[0]
    assert first.lower().startswith(what.lower()), (first, what)
    assert f"({docs[0]})" in first, f"{script}'s first line does not name {docs[0]}"


@pytest.mark.parametrize("module", SHARED)
def test_a_shared_module_is_named_in_the_readme_and_imported_by_a_script(module: str) -> None:
    readme = (FOLDER / "README.md").read_text(encoding="utf-8")
    assert f"`{module}`" in readme, f"benchmarks/README.md does not name {module}"
    name = module.removesuffix(".py")
    users = [s for s in SCRIPTS if s.endswith(".py") and name in {
        n.module if isinstance(n, ast.ImportFrom) else a.name
        for n in ast.walk(ast.parse((FOLDER / s).read_text(encoding="utf-8")))
        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}]
    assert users, f"no script imports {module}: remove it"


def test_no_script_shares_a_name_with_a_module_of_specchat_bench() -> None:
    bench = {p.name for p in (REPO / "specchat" / "bench").glob("*.py")} - {"sweep.py"}
    # sweep.py is the one exception: it prints specchat/bench/sweep.py's results, the same
    # thing under the same name.
    assert bench.isdisjoint(SCRIPTS)


def test_the_held_out_inputs_are_files_the_bench_reads() -> None:
    prompts = load_prompts(FOLDER / "heldout_prompts.jsonl")
    builtin = load_prompts(None)
    assert len(prompts) == 19 and categories_of(prompts) == categories_of(builtin)
    assert not {p.text for p in prompts} & {p.text for p in builtin}  # held out, not copies
    sessions = load_sessions(FOLDER / "heldout_sessions.jsonl")
    assert [len(s.requests) for s in sessions] == [5, 5, 4]
    assert not {s.name for s in sessions} & {s.name for s in load_sessions(None)}
