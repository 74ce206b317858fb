"""The layers of specchat, read off the import statements (lazy ones inside functions and
TYPE_CHECKING blocks included): no module imports a layer above its own, the three consumers
of a backend (chat, serve, bench) do not import each other, only llm/ imports llama_cpp, the
engine imports nothing outside itself, and no two modules import each other in a circle.

And in every Python file of the repository (specchat/, tests/, benchmarks/, ...): no module
uses another module's private name (a leading underscore), neither imported
(`from x import _y`) nor reached as an attribute of the module (`x._y`). No file under tests/
imports a test module (tests/**/test_*.py): what tests share lives in tests/support/ or in a
conftest.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "specchat"

# Lowest first. A module may import its own layer and those below; within a layer only its
# own package (chat, serve and bench are peers that never import each other).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("specchat", "specchat.errors", "specchat.paths"),
    ("specchat.fileio",),
    ("specchat.fileread",),
    ("specchat.engine",),
    ("specchat.llm",),
    ("specchat.models",),
    ("specchat.settings",),
    ("specchat.term",),
    ("specchat.backend",),
    ("specchat.chat", "specchat.serve", "specchat.bench"),
    ("specchat.commands",),
    ("specchat.cli",),
    ("specchat.__main__",),
)
LLAMA_MODULES = {"specchat.llm.lib", "specchat.llm.model", "specchat.llm.modeltext",
                 "specchat.llm.context",
                 "specchat.llm.files",
                 "specchat.llm.seqtree", "specchat.llm.sidefill"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}

# Folders that hold no source of ours: tools' caches, builds, a checkout's virtualenvs.
NOT_SOURCE = {"build", "dist", "__pycache__", "node_modules", "gpu-kit", "gpu-check"}


def _is_source(relative: Path) -> bool:
    return not any(part.startswith((".", "venv")) or part in NOT_SOURCE
                   or part.endswith(".egg-info") for part in relative.parts[:-1])


def _dotted(relative: Path) -> str:
    parts = relative.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


# Every Python file of the repository, by dotted name (tests.test_tree, benchmarks.sweep, ...).
EVERY_FILE = {_dotted(p.relative_to(REPO)): p for p in sorted(REPO.rglob("*.py"))
              if _is_source(p.relative_to(REPO))}


def _targets(node: ast.Import | ast.ImportFrom, here: str) -> list[str]:
    """The specchat modules an import statement loads (a name that is a submodule counts as
    that submodule; anything else imported from a package counts as the package)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = node.module or ""
    if node.level:  # relative: resolve against this module's package
        package = here if MODULES[here].name == "__init__.py" else here.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}".rstrip(".")
    found = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        found.append(sub if sub in MODULES else base)
    return found


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(_targets(node, module))
    return out


GRAPH = {m: {t for t in imports_of(m) if t in MODULES and t != m} for m in MODULES}


def _layer(module: str) -> tuple[int, str]:
    """(layer index, the package that owns the module within its layer)."""
    best: tuple[int, str] | None = None
    for index, owners in enumerate(LAYERS):
        for owner in owners:
            inside = module == owner or module.startswith(owner + ".")
            if inside and owner != "specchat" and (best is None or len(owner) > len(best[1])):
                best = (index, owner)
    return best if best is not None else (0, "specchat")


def test_the_layers_are_known() -> None:
    for module in MODULES:
        index, owner = _layer(module)
        assert owner != "specchat" or module == "specchat", f"{module} belongs to no layer"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_upward_or_sideways_imports(module: str) -> None:
    index, owner = _layer(module)
    for target in sorted(GRAPH[module]):
        t_index, t_owner = _layer(target)
        assert t_index <= index, f"{module} (layer {owner}) imports {target} above it"
        if t_index == index and t_owner != owner:
            assert index == 0, f"{module} imports its peer {target}"


def test_no_import_circles() -> None:
    """Every strongly connected component of the module graph is a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    assert circles == []


def test_only_llm_imports_llama_cpp() -> None:
    users = {m for m in MODULES if any(t == "llama_cpp" or t.startswith("llama_cpp.")
                                       for t in imports_of(m))}
    assert users <= LLAMA_MODULES and users


def test_the_engine_imports_nothing_outside_itself() -> None:
    for module in (m for m in MODULES if m.startswith("specchat.engine")):
        outside = {t for t in GRAPH[module] if not t.startswith("specchat.engine")}
        assert outside == set(), f"{module} imports {outside}"


def test_specchat_imports_neither_tests_nor_research_scripts() -> None:
    for module in MODULES:
        outside = {t for t in imports_of(module) if t.partition(".")[0] in ("tests", "benchmarks")}
        assert outside == set(), f"{module} imports {outside}"


def test_a_negative_control_fails() -> None:
    """The checks see a lazy import inside a function: a fake upward import is caught."""
    tree = ast.parse("def f():\n    from specchat.commands import ask\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    targets = _targets(node, "specchat.engine.loop")
    assert targets == ["specchat.commands.ask"]
    assert _layer(targets[0])[0] > _layer("specchat.engine.loop")[0]


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _from_module(node: ast.ImportFrom, here: str, is_package: bool) -> str:
    """The absolute dotted name of the module a `from ... import` statement in `here` names."""
    base = node.module or ""
    if node.level:
        package = here if is_package else here.rpartition(".")[0]
        for _ in range(node.level - 1):
            package = package.rpartition(".")[0]
        base = f"{package}.{base}".rstrip(".")
    return base


def private_uses(source: str, here: str, is_package: bool, ours: set[str]) -> list[str]:
    """Where module `here` (whose text is `source`) uses a private name of another of `ours`
    (dotted module names): `from x import _y` (relative imports resolved) and `x._y` where x
    is bound to such a module by an import. One line each, with its line number."""
    found: list[str] = []
    bound: dict[str, str] = {}  # local name -> the module it is bound to
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            base = _from_module(node, here, is_package)
            for alias in node.names:
                if base in ours and base != here and _private(alias.name):
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
                if f"{base}.{alias.name}" in ours:
                    bound[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.partition(".")[0]
                bound[name] = alias.name if alias.asname else name
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        chain: list[str] = []
        value: ast.expr = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if isinstance(value, ast.Name) and value.id in bound:
            module = ".".join([bound[value.id], *reversed(chain)])
            if module in ours and module != here:
                found.append(f"{node.lineno}: {module}.{node.attr}")
    return found


def test_every_python_file_is_checked() -> None:
    folders = {name.partition(".")[0] for name in EVERY_FILE}
    assert {"specchat", "tests", "benchmarks"} <= folders
    assert "tests.test_architecture" in EVERY_FILE


@pytest.mark.parametrize("module", sorted(EVERY_FILE))
def test_no_private_name_is_used_across_modules(module: str) -> None:
    path = EVERY_FILE[module]
    uses = private_uses(path.read_text(encoding="utf-8"), module, path.name == "__init__.py",
                        set(EVERY_FILE))
    assert uses == [], f"{path.relative_to(REPO)} uses private names of other modules: {uses}"


OURS = {"specchat", "specchat.engine", "specchat.engine.loop", "specchat.bench",
        "specchat.bench.replay", "tests", "tests.fakes"}


@pytest.mark.parametrize(("source", "use"), [
    ("from specchat.engine.loop import Hooks, _Run\n", "from specchat.engine.loop import _Run"),
    ("def f():\n    from specchat.engine.loop import (\n        _Run as R,\n    )\n",
     "from specchat.engine.loop import _Run"),
    ("from .loop import _Run\n", "from specchat.engine.loop import _Run"),
    ("from ..engine import loop\nloop._Run\n", "specchat.engine.loop._Run"),
    ("import specchat.engine.loop\nspecchat.engine.loop._Run()\n",
     "specchat.engine.loop._Run"),
    ("import specchat.engine.loop as el\nx = el._Run\n", "specchat.engine.loop._Run"),
    ("from tests import fakes\nfakes._helper(1)\n", "tests.fakes._helper"),
])
def test_a_planted_private_use_is_caught(source: str, use: str) -> None:
    uses = private_uses(source, "specchat.engine.drafters", False, OURS)
    assert [u.partition(": ")[2] for u in uses] == [use]


@pytest.mark.parametrize("source", [
    "from specchat.engine.loop import generate_with, __doc__\n",  # public and dunder names
    "import numpy as np\nnp._NoValue\n",  # another project's private: not ours to rule
    "from specchat.engine import loop\nloop.Hooks._fields\n",  # a class's attribute
    "def f(x):\n    return x._cache\n",  # an object's attribute
])
def test_what_is_not_a_private_use_across_modules(source: str) -> None:
    assert private_uses(source, "specchat.engine.drafters", False, OURS) == []


def test_a_module_may_use_its_own_private_names() -> None:
    source = "from specchat.engine.loop import _Run\nimport specchat.engine.loop as me\nme._Run\n"
    assert private_uses(source, "specchat.engine.loop", False, OURS) == []


def _is_test_module(name: str) -> bool:
    return name.partition(".")[0] == "tests" and name.rpartition(".")[2].startswith("test_")


def imports_of_test_modules(source: str, here: str, is_package: bool, ours: set[str]) -> list[str]:
    """Where module `here` imports a test module (tests.**.test_*) other than itself, lazy
    imports included: `import tests.x.test_y`, `from tests.x.test_y import z`, and
    `from tests.x import test_y` when tests.x.test_y is one of `ours`. One line each, with its
    line number."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _from_module(node, here, is_package)
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in ours else base
                       for a in node.names]
        else:
            continue
        found += [f"{node.lineno}: {t}" for t in dict.fromkeys(targets)
                  if _is_test_module(t) and t != here]
    return found


def test_no_test_file_imports_a_test_module() -> None:
    tests = {m for m in EVERY_FILE if m.partition(".")[0] == "tests"}
    found = {m: uses for m in sorted(tests)
             if (uses := imports_of_test_modules(EVERY_FILE[m].read_text(encoding="utf-8"), m,
                                             EVERY_FILE[m].name == "__init__.py", tests))}
    assert found == {}, "move what test files share to tests/support/ or a conftest.py"


TEST_FILES = {"tests", "tests.serve", "tests.serve.test_hostile", "tests.serve.test_clients",
              "tests.support", "tests.support.fakeserve"}


@pytest.mark.parametrize(("source", "use"), [
    ("from tests.serve.test_hostile import Server, start\n", "tests.serve.test_hostile"),
    ("from tests.serve import test_hostile\n", "tests.serve.test_hostile"),
    ("import tests.serve.test_hostile as hostile\n", "tests.serve.test_hostile"),
    ("def f():\n    from .test_hostile import start\n", "tests.serve.test_hostile"),
    ("from . import test_hostile, test_clients\n", "tests.serve.test_hostile"),
])
def test_a_planted_import_of_a_test_module_is_caught(source: str, use: str) -> None:
    found = imports_of_test_modules(source, "tests.serve.test_requests", False, TEST_FILES)
    assert [u.partition(": ")[2] for u in found][:1] == [use]


@pytest.mark.parametrize("source", [
    "from tests.support.fakeserve import Server, start\n",
    "from tests.support import fakeserve\n",
    "import pytest\nfrom specchat.serve import app\n",
    "from tests.support.fakeserve import test_server\n",  # a name that is no module
])
def test_what_is_not_an_import_of_a_test_module(source: str) -> None:
    assert imports_of_test_modules(source, "tests.serve.test_requests", False, TEST_FILES) == []
