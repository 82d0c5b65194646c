"""The library's tree shows its layers: no import cycles, dependencies point down, one home per concept.

These tests read the source with `ast` (nothing is imported), so they are fast and say exactly which
file breaks a rule.
"""

from __future__ import annotations

import ast
import collections
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "batchlab"

#: Layer of each top-level module or subpackage; an import may only go to the same or a lower layer.
LAYERS: dict[str, int] = {
    "_validate": 0, "paths": 0,
    "theory": 1,
    "config_pbtxt": 2, "server": 2, "lm": 2, "sim": 2,
    "models": 3, "load": 3,
    "probe": 4,
    "quiz": 5, "plotting": 5,
    "course": 6,
    "viz": 7, "bench": 7,
    "labs": 8,
    "tools": 9, "start": 9, "classroom": 9,
}
#: Imports between units of one layer that the design forbids (none today: same-layer units
#: may import each other as long as no cycle forms).
FORBIDDEN: set[tuple[str, str]] = set()
#: Names that several modules define on purpose (one entry point or plug-in interface each).
SHARED_NAMES = {"main", "build_parser", "run", "TritonPythonModel"}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(SRC).with_suffix("")
        if "model_repository" in rel.parts:
            continue
        name = ".".join(rel.parts)
        out[name.removesuffix(".__init__")] = path
    return out


MODULES = _modules()


def _target(node: ast.ImportFrom | ast.Import, module: str, is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        if node.level:
            parts = module.split(".") if is_pkg else module.split(".")[:-1]
            base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names]
    out = []
    for name in names:
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES and name != module:
            out.append(name)
    return out


def _imports() -> dict[str, dict[str, list[ast.AST]]]:
    """module -> imported batchlab module -> the import nodes (any depth in the file)."""
    graph: dict[str, dict[str, list[ast.AST]]] = {}
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        edges: dict[str, list[ast.AST]] = collections.defaultdict(list)
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for t in _target(node, module, path.name == "__init__.py"):
                    edges[t].append(node)
        graph[module] = edges
    return graph


GRAPH = _imports()


def _unit(module: str) -> str:
    """The top-level module or subpackage a module belongs to (``batchlab.sim.dynamic`` -> ``sim``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_every_unit_has_a_layer():
    units = {_unit(m) for m in MODULES} - {""}
    assert units <= set(LAYERS), f"give these a layer in LAYERS: {sorted(units - set(LAYERS))}"


def test_at_most_six_top_level_modules():
    top = sorted(p.name for p in PKG.glob("*.py"))
    assert len(top) <= 6, top


def test_no_import_cycles_between_modules():
    edges = {m: set(t) for m, t in GRAPH.items()}
    assert _cycles(edges) == []


def test_no_import_cycles_between_packages():
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for m, targets in GRAPH.items():
        if m.endswith(".__main__"):  # a package's CLI sits above the package (tools layer)
            continue
        for t in targets:
            if _unit(m) != _unit(t):
                edges[_unit(m)].add(_unit(t))
    assert _cycles(edges) == []


def test_dependencies_point_down():
    bad = []
    for m, targets in GRAPH.items():
        if m.endswith(".__main__"):
            continue
        src = _unit(m)
        for t in targets:
            dst = _unit(t)
            if src == dst or not src or not dst:
                continue
            if LAYERS[dst] > LAYERS[src] or (src, dst) in FORBIDDEN:
                bad.append(f"{m} -> {t} ({src}: layer {LAYERS[src]}, {dst}: layer {LAYERS[dst]})")
    assert bad == [], "\n".join(bad)


def _reason_given(lines: list[str], node: ast.AST) -> bool:
    line = lines[node.lineno - 1]
    above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
    return "#" in line or above.startswith("#")


def test_imports_at_module_top():
    """An import inside a function or class carries a one-line reason (optional dependency, load order)."""
    bad = []
    for module, path in MODULES.items():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        lines = text.splitlines()
        top = {id(n) for n in tree.body}
        top |= {id(n) for s in tree.body if isinstance(s, (ast.If, ast.Try)) for n in ast.walk(s)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in top:
                if not _reason_given(lines, node):
                    bad.append(f"{path.relative_to(SRC)}:{node.lineno}: {lines[node.lineno - 1].strip()}")
    assert bad == [], "\n".join(bad)


def _public_definitions() -> dict[str, list[str]]:
    defs: dict[str, list[str]] = collections.defaultdict(list)
    for module, path in MODULES.items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            names = []
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name) and t.id.isupper()]
            for name in names:
                if not name.startswith("_"):
                    defs[name].append(module)
    return defs


def test_each_public_name_has_one_home():
    """Two modules defining the same public function, class or constant is a second copy of a concept."""
    twice = {k: v for k, v in _public_definitions().items() if len(v) > 1 and k not in SHARED_NAMES}
    assert twice == {}


@pytest.mark.parametrize("concept", [
    "kv_bytes_per_token", "affine_speedup", "littles_law_l", "measure_batch_times",
    "BatchRule", "edit_config", "stage_model", "MetricsTimeline",
])
def test_named_concepts_defined_once(concept):
    assert len(_public_definitions().get(concept, [])) == 1, concept


def test_the_checker_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
