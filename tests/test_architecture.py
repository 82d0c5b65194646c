"""The library's tree shows its layers: no import cycles, dependencies point down, one home per concept.

These tests read the source with `ast` (nothing is imported, except in the one test that imports
`batchlab.batching` in a fresh interpreter), so they are fast and say exactly which file breaks a rule.
"""

from __future__ import annotations

import ast
import collections
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "batchlab"

#: Layer of each top-level module or subpackage; an import may only go to the same or a lower layer.
LAYERS: dict[str, int] = {
    "_validate": 0, "paths": 0,
    "theory": 1,
    "batching": 2,
    "config_pbtxt": 3, "server": 3, "lm": 3, "sim": 3,
    "models": 4, "load": 4,
    "probe": 5,
    "quiz": 6, "plotting": 6,
    "course": 7,
    "viz": 8, "bench": 8,
    "labs": 9,
    "tools": 10, "start": 10, "classroom": 10,
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
TREES = {m: ast.parse(p.read_text(encoding="utf-8")) for m, p in MODULES.items()}


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
        tree = TREES[module]
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
    for _module, path in MODULES.items():
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
    for module in MODULES:
        for node in TREES[module].body:
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


# --------------------------------------------------------------------------- one home per concept, by shape
#
# A concept copied under another name escapes `test_each_public_name_has_one_home`. Each detector
# below recognises one concept by what its code does (not by its name) and returns the lines of a
# parsed module that define it; the concept may be defined only in its home module.


def _call_name(node: ast.AST) -> str:
    """``np.linalg.lstsq(...)`` -> "np.linalg.lstsq"; "" for anything but a call of a (dotted) name."""
    if not isinstance(node, ast.Call):
        return ""
    parts, f = [], node.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def _calls(node: ast.AST) -> set[str]:
    return {_call_name(n) for n in ast.walk(node)} - {""}


def _affine_fit(tree: ast.AST) -> list[int]:
    """A function fitting t = a + b·x: np.polyfit of degree 1, or lstsq on a design with a column of ones."""
    out = []
    for fn in _functions(tree):
        calls = _calls(fn)
        polyfit1 = any(_call_name(n).endswith("polyfit") and len(n.args) >= 3 and isinstance(n.args[2], ast.Constant)
                       and n.args[2].value == 1 for n in ast.walk(fn))
        lstsq = any(c.endswith("linalg.lstsq") for c in calls)
        if polyfit1 or (lstsq and any(c.endswith(("ones", "ones_like")) for c in calls)):
            out.append(fn.lineno)
    return out


def _compute_infer_lookup(tree: ast.AST) -> list[int]:
    """Reading the statistics' ``compute_infer`` entry: ``x["compute_infer"]`` or ``x.get("compute_infer", ...)``."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "compute_infer":
            out.append(n.lineno)
        elif (_call_name(n).endswith(".get") and n.args and isinstance(n.args[0], ast.Constant)
              and n.args[0].value == "compute_infer"):
            out.append(n.lineno)
    return out


def _settle_loop(tree: ast.AST) -> list[int]:
    """Waiting until the statistics' counts (success, inference/execution counts) reach a goal: a loop
    that sleeps, or a function that polls (`poll`, `wait_for`), reading those counts."""
    counts = {"success", "inference_count", "execution_count", "batch_executions"}
    out = []
    for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.While, ast.For, ast.AsyncFor))):
        sleeps = any(c.endswith("sleep") for c in _calls(loop))
        if sleeps and any(isinstance(n, ast.Attribute) and n.attr in counts for n in ast.walk(loop)):
            out.append(loop.lineno)
    for fn in _functions(tree):
        polls = any(c.split(".")[-1] in ("poll", "wait_for") for c in _calls(fn))
        if polls and any(isinstance(n, ast.Attribute) and n.attr in counts for n in ast.walk(fn)):
            out.append(fn.lineno)
    return out


_CLOCKS = ("monotonic", "perf_counter", "time")


def _deadline_poll(tree: ast.AST) -> list[int]:
    """Polling until a deadline: a loop that sleeps and reads a clock or a ``deadline``."""
    out = []
    for loop in (n for n in ast.walk(tree) if isinstance(n, (ast.While, ast.For))):
        calls = _calls(loop)
        clock = any(c.startswith("time.") and c.split(".")[-1] in _CLOCKS for c in calls) or any(
            isinstance(n, ast.Name) and "deadline" in n.id for n in ast.walk(loop))
        if clock and any(c.endswith("sleep") and not c.startswith("asyncio") for c in calls):
            out.append(loop.lineno)
    return out


def _server_constructor(tree: ast.AST) -> list[int]:
    """Getting a server other than through `server.connect`: constructing a TritonServer / ExternalServer."""
    return [n.lineno for n in ast.walk(tree)
            if _call_name(n).rsplit(".", 1)[-1] in ("TritonServer", "ExternalServer")]


def _stats_reader(tree: ast.AST) -> list[int]:
    """Reading the statistics extension: ``client.get_inference_statistics`` or a ``…/stats`` URL."""
    out = [n.lineno for n in ast.walk(tree) if _call_name(n).endswith("get_inference_statistics")]
    out += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) and any(
        isinstance(v, ast.Constant) and str(v.value).endswith("/stats") for v in n.values)]
    return out


def _notebook_reader(tree: ast.AST) -> list[int]:
    """Reading a notebook file: `nbformat.read(s)`, or a function that json-loads and names a notebook's
    parts ("cells", "nbformat", ".ipynb") or is named for one."""
    out = [n.lineno for n in ast.walk(tree) if _call_name(n) in ("nbformat.read", "nbformat.reads")]
    for fn in _functions(tree):
        if not any(c in ("json.load", "json.loads") for c in _calls(fn)):
            continue
        named = "notebook" in fn.name or fn.name.startswith("nb") or any(
            isinstance(n, ast.Constant) and isinstance(n.value, str)
            and (n.value in ("cells", "nbformat") or n.value.endswith(".ipynb")) for n in ast.walk(fn))
        if named:
            out.append(fn.lineno)
    return out


def _triton_url_reader(tree: ast.AST) -> list[int]:
    """Choosing the TRITON_URL server: reading the variable, or building an ExternalServer from it."""
    out = []
    for n in ast.walk(tree):
        name = _call_name(n)
        if name.endswith(("environ.get", "getenv")) and n.args and isinstance(n.args[0], ast.Constant) \
                and n.args[0].value == "TRITON_URL":
            out.append(n.lineno)
        elif name.endswith("ExternalServer.from_env"):
            out.append(n.lineno)
        elif isinstance(n, ast.Subscript) and isinstance(n.slice, ast.Constant) and n.slice.value == "TRITON_URL":
            out.append(n.lineno)
    return out


def _startup_timeout(tree: ast.AST) -> list[int]:
    """A startup timeout for a Triton server given as a number (default or override) anywhere but its one default."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and (_call_name(n).endswith(("Server", "connect", "lab_server", "start"))):
            out += [n.lineno for k in n.keywords if k.arg == "startup_timeout" and isinstance(k.value, ast.Constant)]
        elif isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "DEFAULT_STARTUP_TIMEOUT_S"
                                               for t in n.targets):
            out.append(n.lineno)
    for fn in _functions(tree):
        args = fn.args.args + fn.args.kwonlyargs
        defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + fn.args.defaults + fn.args.kw_defaults
        out += [fn.lineno for a, d in zip(args, defaults) if a.arg == "startup_timeout" and isinstance(d, ast.Constant)]
    return out


_QUANTILE_FUNCTIONS = ("percentile", "nanpercentile", "quantile", "nanquantile", "quantiles")


def _percentile_summary(tree: ast.AST) -> list[int]:
    """Computing a latency percentile by hand: a call of np.percentile / np.quantile / statistics.quantiles
    (any library's), or a tuple of percentile levels named like ``PERCENTILES``."""
    out = [n.lineno for n in ast.walk(tree)
           if "." in _call_name(n) and _call_name(n).rsplit(".", 1)[1] in _QUANTILE_FUNCTIONS]
    out += [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id.endswith("PERCENTILES") for t in n.targets)]
    return out


def _json_cleaner(tree: ast.AST) -> list[int]:
    """A recursive function that turns non-finite floats into None (a JSON cleaner)."""
    out = []
    for fn in _functions(tree):
        calls = _calls(fn)
        recursive = any(isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == fn.name
                        for n in ast.walk(fn))
        to_none = any(isinstance(n, (ast.Return, ast.IfExp)) and any(
            isinstance(v, ast.Constant) and v.value is None for v in ast.iter_child_nodes(n)) for n in ast.walk(fn))
        if recursive and to_none and any(c.endswith(("isfinite", "isnan")) for c in calls):
            out.append(fn.lineno)
    return out


def _relative_error(tree: ast.AST) -> list[int]:
    """A function returning ``(x - y) / y`` (relative error), possibly guarded by a conditional."""
    def is_rel(e: ast.AST) -> bool:
        if isinstance(e, ast.IfExp):
            return is_rel(e.body) or is_rel(e.orelse)
        return (isinstance(e, ast.BinOp) and isinstance(e.op, ast.Div) and isinstance(e.left, ast.BinOp)
                and isinstance(e.left.op, ast.Sub) and ast.dump(e.left.right) == ast.dump(e.right))
    return [fn.lineno for fn in _functions(tree)
            if any(isinstance(n, ast.Return) and n.value is not None and is_rel(n.value) for n in ast.walk(fn))]


_PARSER_MESSAGES = ("has no field named", "Expected identifier", "Couldn't parse integer", "is specified along with")


def _config_error_text(tree: ast.AST) -> list[int]:
    """Matching protobuf text-format parser messages (to explain them): a pattern quoting one."""
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and any(m in n.value for m in _PARSER_MESSAGES)]


_LM_STREAM_PARAMS = {"max_active", "kv_token_budget", "max_waiting"}
_LM_STREAM_NAMES = {"MAX_ACTIVE", "KV_TOKEN_BUDGET", "MAX_WAITING"}
_LM_STREAM_VALUES = {8, 4096, 256}


def _lm_stream_default(tree: ast.AST) -> list[int]:
    """lm_stream's default max_active / kv_token_budget / max_waiting (8, 4096, 256) written as a number."""
    num = lambda v: (isinstance(v, ast.Constant) and type(v.value) is int  # noqa: E731
                     and v.value in _LM_STREAM_VALUES)
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name) and n.target.id in _LM_STREAM_PARAMS \
                and num(n.value):
            out.append(n.lineno)
        elif isinstance(n, ast.Assign) and num(n.value) and any(isinstance(t, ast.Name) and t.id in _LM_STREAM_NAMES
                                                                  for t in n.targets):
            out.append(n.lineno)
        elif isinstance(n, ast.Call):
            args = list(n.args)
            out += [n.lineno for a, b in zip(args, args[1:])
                    if isinstance(a, ast.Constant) and a.value in _LM_STREAM_PARAMS and num(b)]
            out += [n.lineno for k in n.keywords if k.arg in _LM_STREAM_PARAMS and num(k.value)]
    for fn in _functions(tree):
        args = fn.args.args + fn.args.kwonlyargs
        defaults = [None] * (len(fn.args.args) - len(fn.args.defaults)) + fn.args.defaults + fn.args.kw_defaults
        out += [fn.lineno for a, d in zip(args, defaults) if a.arg in _LM_STREAM_PARAMS and num(d)]
    return out


def _cjk_width(tree: ast.AST) -> list[int]:
    """Measuring text in terminal columns: a call of `unicodedata.east_asian_width`."""
    return [n.lineno for n in ast.walk(tree) if _call_name(n).endswith("east_asian_width")]


#: concept -> (its one home, the detector, a planted second home the detector must catch)
CONCEPTS = {
    "affine fit t(B) = a + b·B": ("batchlab.theory.formulas", _affine_fit,
                                  "import numpy as np\ndef line(x, y):\n    return np.polyfit(x, y, 1)\n"),
    "batch times from the statistics": ("batchlab.load.stats", _compute_infer_lookup,
                                        "def per_batch(slot):\n    return slot['compute_infer'][1] / slot['compute_infer'][0]\n"),
    "wait until the statistics settle": ("batchlab.load.stats", _settle_loop,
                                         "import time\ndef wait(read, n):\n    while read().success < n:\n"
                                         "        time.sleep(0.01)\n"),
    "the TRITON_URL server or an embedded one": ("batchlab.server", _triton_url_reader,
                                                 "import os\ndef mine():\n    return os.environ.get('TRITON_URL')\n"),
    "server startup timeout": ("batchlab.server", _startup_timeout,
                               "def go(m):\n    return TritonServer(models=m, startup_timeout=180)\n"),
    "latency percentile summary": ("batchlab.sim.summary", _percentile_summary,
                                   "import numpy as np\ndef tail(lat):\n"
                                   "    return {'tail_s': float(np.percentile(lat, 99))}\n"),
    "the percentile set": ("batchlab.sim.summary", _percentile_summary, "SLO_PERCENTILES = (50, 95, 99)\n"),
    "polling until a deadline": ("batchlab.server", _deadline_poll,
                                 "import time\ndef wait(ready, timeout):\n    deadline = time.monotonic() + timeout\n"
                                 "    while time.monotonic() < deadline:\n        if ready():\n            return\n"
                                 "        time.sleep(0.1)\n"),
    "getting a server (one path, one stop policy)": (
        "batchlab.server", _server_constructor, "def mine(models):\n    return TritonServer(models=models).start()\n"),
    "reading the statistics": ("batchlab.load.stats", _stats_reader,
                               "import json, urllib.request\ndef stats(url, m):\n    u = f'http://{url}/v2/models/{m}/stats'\n"
                               "    return json.loads(urllib.request.urlopen(u).read())\n"),
    "reading a notebook": ("batchlab.paths", _notebook_reader,
                           "import json\ndef cells_of(path):\n    return json.loads(open(path).read())['cells']\n"),
    "JSON cleaning": ("batchlab.load.report", _json_cleaner,
                      "import math\ndef clean(v):\n    if isinstance(v, dict):\n"
                      "        return {k: clean(x) for k, x in v.items()}\n"
                      "    return None if isinstance(v, float) and not math.isfinite(v) else v\n"),
    "relative error": ("batchlab.theory.formulas", _relative_error,
                       "def err(pred, meas):\n    return (pred - meas) / meas if meas else float('nan')\n"),
    "config parse error explained": ("batchlab.config_pbtxt", _config_error_text,
                                     "import re\nNO_FIELD = re.compile(r'has no field named \"(\\w+)\"')\n"),
    "CJK text width": ("batchlab.quiz.audit", _cjk_width,
                       "import unicodedata\ndef w(t):\n    return sum(1 + (unicodedata.east_asian_width(c) == 'W') for c in t)\n"),
    "lm_stream defaults": ("batchlab.batching.scheduler", _lm_stream_default,
                           "def admit(waiting, max_active=8, kv_token_budget=4096):\n    return waiting\n"),
}


def _concept_sites(detector: Callable[[ast.AST], list[int]]) -> dict[str, list[int]]:
    sites = {}
    for module, _path in MODULES.items():
        lines = detector(TREES[module])
        if lines:
            sites[module] = sorted(set(lines))
    return sites


@pytest.mark.parametrize("concept", sorted(CONCEPTS))
def test_each_concept_has_one_home(concept):
    home, detector, _ = CONCEPTS[concept]
    sites = _concept_sites(detector)
    assert home in sites, f"{concept}: the detector does not recognise its home {home}"
    elsewhere = {m: lines for m, lines in sites.items() if m != home}
    assert elsewhere == {}, f"{concept}: a second home (call {home} instead): {elsewhere}"


@pytest.mark.parametrize("concept", sorted(CONCEPTS))
def test_the_checker_finds_a_planted_second_home(concept):
    _, detector, planted = CONCEPTS[concept]
    assert detector(ast.parse(planted)) != []
    assert detector(ast.parse("def unrelated(x):\n    return x + 1\n")) == []


# --------------------------------------------------------------------------- the three mechanisms
#
# What the course is about, each written once, short enough to read top to bottom, and shown in full
# where a chapter teaches it (tests/test_shown_source.py checks the chapters show these very lines).

#: mechanism -> (home module, the definitions a chapter shows: "name" or "Class.method").
MECHANISMS: dict[str, tuple[str, tuple[str, ...]]] = {
    "dynamic batcher": ("batchlab.batching.dynamic", ("next_batch", "Payload", "RateLimiter", "DynamicBatcher")),
    "sequence batcher's slot assignment": ("batchlab.batching.slots", ("SequenceSlots",)),
    "continuous-batching step": ("batchlab.batching.scheduler", (
        "Scheduler.schedule", "Scheduler._schedule_running", "Scheduler._schedule_waiting",
        "Scheduler._preempt", "Scheduler.complete")),
}
MAX_LINES = 60
#: Where no function may exceed MAX_LINES: the simulators and the continuous scheduler.
SHORT = [m for m in MODULES if m.startswith("batchlab.sim.")] + ["batchlab.batching.scheduler"]
#: Who must run each mechanism (by name), so no driver keeps a private copy of the rule.
RUNNERS: dict[str, tuple[str, ...]] = {
    "next_batch": ("batchlab.sim.dynamic",),
    "DynamicBatcher": ("batchlab.sim.dynamic",),
    "SequenceSlots": ("batchlab.sim.sequence",),
    "Scheduler": ("batchlab.sim.continuous", "batchlab.lm.batcher"),
}


def _definition(module: str, dotted: str) -> ast.AST | None:
    """The def/class node `dotted` ("f" or "Class.method") at the top of `module`."""
    body = TREES[module].body
    node = None
    for part in dotted.split("."):
        node = next((n for n in body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            return None
        body = node.body
    return node


def _long_functions(tree: ast.AST) -> list[str]:
    return [f"{fn.name} (line {fn.lineno}, {fn.end_lineno - fn.lineno + 1} lines)"
            for fn in _functions(tree) if fn.end_lineno - fn.lineno + 1 > MAX_LINES]


@pytest.mark.parametrize("mechanism", sorted(MECHANISMS))
def test_each_mechanism_is_short_and_lives_in_its_home(mechanism):
    module, names = MECHANISMS[mechanism]
    for name in names:
        node = _definition(module, name)
        assert node is not None, f"{mechanism}: {module} has no {name}"
        lines = node.end_lineno - node.lineno + 1
        assert lines <= MAX_LINES, f"{mechanism}: {name} is {lines} lines (at most {MAX_LINES}, it is shown in full)"
        top = name.split(".")[0]
        others = [m for m, tree in TREES.items() if m != module
                  and any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == top for n in tree.body)]
        assert others == [], f"{mechanism}: {top} is also defined in {others}"


@pytest.mark.parametrize("module", SHORT)
def test_no_long_function_in_the_simulators(module):
    assert _long_functions(TREES[module]) == [], f"{module}: split these (at most {MAX_LINES} lines)"


@pytest.mark.parametrize("name", sorted(RUNNERS))
def test_the_drivers_run_the_one_mechanism(name):
    for module in RUNNERS[name]:
        used = {n.id for n in ast.walk(TREES[module]) if isinstance(n, ast.Name)}
        assert name in used, f"{module} does not use {name}: it must run the one mechanism, not a copy"


def test_the_dynamic_batcher_reads_in_one_sitting():
    """Issue 40: no function of the dynamic batcher over 40 lines, the whole mechanism at most 120."""
    module, names = MECHANISMS["dynamic batcher"]
    nodes = [_definition(module, name) for name in names]
    assert [fn.name for n in nodes for fn in _functions(n) if fn.end_lineno - fn.lineno + 1 > 40] == []
    assert sum(n.end_lineno - n.lineno + 1 for n in nodes) <= 120


def test_the_length_check_finds_a_planted_long_function():
    planted = "def run(x):\n" + "    x += 1\n" * MAX_LINES + "    return x\n"
    assert _long_functions(ast.parse(planted)) == [f"run (line 1, {MAX_LINES + 2} lines)"]


# --------------------------------------------------------------------------- the mechanisms' package

#: What `batchlab.batching` may import from the course library: the base and theory layers only.
BATCHING_MAY_IMPORT = {"_validate", "paths", "theory", "batching"}


def test_the_batching_package_imports_only_the_base_layers():
    bad = [f"{m} -> {t}" for m, targets in GRAPH.items() if _unit(m) == "batching"
           for t in targets if _unit(t) not in BATCHING_MAY_IMPORT]
    assert bad == [], "batchlab.batching must stay free of the engines above it:\n" + "\n".join(bad)


def test_importing_the_mechanisms_loads_no_protobuf_or_tritonclient():
    """`python -c "import batchlab.batching"` in a fresh interpreter loads neither."""
    code = ("import sys, batchlab.batching; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('google', 'tritonclient', 'grpc')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --------------------------------------------------------------------------- the continuous scheduler, readable

#: The continuous-batching scheduler is read top to bottom as nano-vllm's is (issue 41): its module
#: and its KV block manager stay short, every function in them short enough to show in full.
SCHEDULER_MODULES = {"batchlab.batching.scheduler": 250, "batchlab.batching.blocks": 250,
                     "batchlab.batching.policies": 120, "batchlab.batching.request": 120}
SCHEDULER_MAX_FUNCTION = 40


@pytest.mark.parametrize("module", sorted(SCHEDULER_MODULES))
def test_the_scheduler_modules_are_short(module):
    lines = len(MODULES[module].read_text(encoding="utf-8").splitlines())
    assert lines <= SCHEDULER_MODULES[module], f"{module}: {lines} lines (at most {SCHEDULER_MODULES[module]})"
    long = [f"{fn.name} ({fn.end_lineno - fn.lineno + 1} lines)" for fn in _functions(TREES[module])
            if fn.end_lineno - fn.lineno + 1 > SCHEDULER_MAX_FUNCTION]
    assert long == [], f"{module}: split these (at most {SCHEDULER_MAX_FUNCTION} lines each): {long}"


def test_the_scheduler_length_check_finds_a_planted_long_function():
    planted = "def f(x):\n" + "    x += 1\n" * SCHEDULER_MAX_FUNCTION + "    return x\n"
    assert [fn for fn in _functions(ast.parse(planted)) if fn.end_lineno - fn.lineno + 1 > SCHEDULER_MAX_FUNCTION]


# --------------------------------------------------------------------------- defaults: one source of truth
#
# The models' knobs have their defaults in Python (the scheduler's, the generation limits, the LM's
# shape); the model repository's config.pbtxt files spell them as strings. Each string must equal its
# Python default, so a changed default cannot leave a stale copy in a config.

def _knob_defaults() -> dict[str, int]:
    # imported here: the rest of this file reads the source without importing it
    from batchlab.batching.blocks import BLOCK_SIZE
    from batchlab.batching.scheduler import KV_TOKEN_BUDGET, MAX_ACTIVE, MAX_WAITING
    from batchlab.models._gen_inputs import DEFAULT_MAX_PROMPT_TOKENS, DEFAULT_MAX_TOKENS_LIMIT
    return {"max_active": MAX_ACTIVE, "kv_token_budget": KV_TOKEN_BUDGET, "max_waiting": MAX_WAITING,
            "block_size": BLOCK_SIZE, "max_tokens_limit": DEFAULT_MAX_TOKENS_LIMIT,
            "max_prompt_tokens": DEFAULT_MAX_PROMPT_TOKENS}


def _stale_defaults(text: str, defaults: dict[str, int], width: int) -> list[str]:
    """The knobs of one config.pbtxt whose value differs from its Python default, and an embedding
    output (dims of EMBEDDING) not as wide as the LM's d_model."""
    from batchlab.config_pbtxt import parse_config  # imported here: protobuf, only this test needs it
    cfg = parse_config(text)
    out = [f"{k} = {v.string_value!r}, the default is {defaults[k]}" for k, v in cfg.parameters.items()
           if k in defaults and v.string_value != str(defaults[k])]
    dims = {"d_model": int(cfg.parameters["d_model"].string_value)} if "d_model" in cfg.parameters else {}
    out += [f"EMBEDDING dims {list(o.dims)}, the LM's d_model is {dims.get('d_model', width)}"
            for o in cfg.output if o.name == "EMBEDDING" and list(o.dims) != [dims.get("d_model", width)]]
    return out


def test_the_model_configs_spell_the_python_defaults():
    from batchlab.lm.config import LMConfig  # imported here, as above
    configs = sorted((PKG / "model_repository").glob("*/config.pbtxt"))
    assert configs
    bad = {p.parent.name: s for p in configs
           if (s := _stale_defaults(p.read_text(encoding="utf-8"), _knob_defaults(), LMConfig().d_model))}
    assert bad == {}, "change the config.pbtxt (or the default) so they agree: " + str(bad)


def test_the_defaults_check_finds_a_planted_stale_value():
    planted = ('name: "m"\nbackend: "python"\nparameters { key: "max_active" value { string_value: "16" } }\n'
               'output [ { name: "EMBEDDING" data_type: TYPE_FP32 dims: [ 128 ] } ]\n')
    found = _stale_defaults(planted, _knob_defaults(), 256)
    assert len(found) == 2 and "max_active" in found[0] and "EMBEDDING" in found[1], found


# --------------------------------------------------------------------------- no answer to import

def test_no_public_reference_function():
    """A public ``reference_*`` function answers a lab question for whoever imports it (issue 44)."""
    found = [f"{m}.{n.name}" for m, tree in TREES.items() for n in ast.walk(tree)
             if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name.startswith("reference_")]
    assert found == []


def _branches_on_chinese(tree: ast.AST) -> list[int]:
    """A test of whether Chinese text is in a message (``"字段" in exc.hint``): an explanation keyed by its
    wording instead of by its kind (`ConfigError.kind`)."""
    cjk = lambda v: isinstance(v, ast.Constant) and isinstance(v.value, str) and any(  # noqa: E731
        "\u4e00" <= c <= "\u9fff" for c in v.value)
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Compare) and cjk(n.left)
            and any(isinstance(op, (ast.In, ast.NotIn)) for op in n.ops)
            and any(isinstance(c, ast.Attribute) for c in n.comparators)]


def test_no_explanation_branches_on_its_chinese_wording():
    bad = {m: lines for m, tree in TREES.items() if (lines := _branches_on_chinese(tree))}
    assert bad == {}, f"branch on the error's kind, not on its Chinese text: {bad}"
    planted = "def explain(exc):\n    return exc.hint if '字段' in exc.hint else exc.message\n"
    assert _branches_on_chinese(ast.parse(planted)) == [2]
