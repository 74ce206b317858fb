"""The layers of specchat, read off the import statements (lazy ones inside functions and
TYPE_CHECKING blocks included): no module imports a layer above its own, the three consumers
of a backend (chat, serve, bench) do not import each other, only llm/ imports llama_cpp, the
engine imports nothing outside itself, and no two modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "specchat"

# Lowest first. A module may import its own layer and those below; within a layer only its
# own package (chat, serve and bench are peers that never import each other).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("specchat", "specchat.errors", "specchat.paths"),
    ("specchat.fileio",),
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
LLAMA_MODULES = {"specchat.llm.lib", "specchat.llm.model", "specchat.llm.context",
                 "specchat.llm.files",
                 "specchat.llm.seqtree"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in ROOT.rglob("*.py")}


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


def test_a_negative_control_fails() -> None:
    """The checks see a lazy import inside a function: a fake upward import is caught."""
    tree = ast.parse("def f():\n    from specchat.commands import ask\n")
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom))
    targets = _targets(node, "specchat.engine.loop")
    assert targets == ["specchat.commands.ask"]
    assert _layer(targets[0])[0] > _layer("specchat.engine.loop")[0]
