"""Imports go one way: the module import graph of every package has no cycle.

The graph is built statically with ``ast`` from the sources under ``packages/*/src``: every
``import``/``from ... import`` of one of our modules is an edge, at module level or inside a
function (a function-local import is still a dependency; hiding it in a function only
delays the cycle). Imports under ``if TYPE_CHECKING:`` are left out (they never run).
``from pkg import name`` is an edge to the submodule ``pkg.name`` when that module exists,
else to ``pkg``. Importing ``a.b.c`` also runs ``a/__init__`` and ``a/b/__init__``; those
parent edges are not counted (every module would then depend on ``genesis/__init__``).

That is why a function-local import can still hide a circle at run time (``genesis/__init__``
imports the whole API, so a backend importing ``genesis.random`` closes a loop through it):
``test_backends_import_only_the_contract`` checks the layer rule itself, with function-local
imports counted too, and ``test_function_local_imports_are_lazy_by_design`` allows a
function-local import of our own modules only where it is listed (or ruled) lazy, with why.
"""

from __future__ import annotations

import ast
import os

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
_PACKAGES = os.path.join(_ROOT, "packages")


def _module_files() -> dict[str, str]:
    """Dotted module name -> source path, for every package of the repository."""
    found = {}
    for dist in sorted(os.listdir(_PACKAGES)):
        src = os.path.join(_PACKAGES, dist, "src")
        for folder, _, files in os.walk(src):
            for f in files:
                if not f.endswith(".py"):
                    continue
                rel = os.path.relpath(os.path.join(folder, f), src)[:-3].split(os.sep)
                if rel[-1] == "__init__":
                    rel = rel[:-1]
                found[".".join(rel)] = os.path.join(folder, f)
    return found


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.AST):
    """Every Import/ImportFrom node outside ``if TYPE_CHECKING:`` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, set[str]]:
    """Module -> the repository modules it imports (see the module docstring)."""
    files = _module_files()
    graph: dict[str, set[str]] = {}
    for mod, path in files.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_pkg = os.path.basename(path) == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        edges = set()
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in files)
                continue
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[:len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in files:
                    edges.add(sub)
                elif base in files:
                    edges.add(base)
        edges.discard(mod)
        graph[mod] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _a_cycle(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """One concrete cycle inside a strongly connected component, to show in the error."""
    members = set(comp)
    path, seen = [comp[0]], {comp[0]: 0}
    while True:
        nxt = sorted(w for w in graph[path[-1]] if w in members)[0]
        if nxt in seen:
            return path[seen[nxt]:] + [nxt]
        seen[nxt] = len(path)
        path.append(nxt)


def test_graph_sees_the_packages():
    graph = import_graph()
    assert "genesis.tensor" in graph and "genesis.ops.elementwise" in graph
    assert "genesis.autograd.function" in graph["genesis.tensor"]


def test_find_cycles_detects_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c"]]
    assert _a_cycle(graph, ["a", "b", "c"]) == ["a", "b", "c", "a"]


def test_no_import_cycles():
    graph = import_graph()
    cycles = find_cycles(graph)
    shown = "\n".join(" -> ".join(_a_cycle(graph, c)) + f"   ({len(c)} modules)"
                      for c in cycles)
    assert not cycles, f"import cycles among the packages' modules:\n{shown}"


# The backend side of the contract knows the contract only (DESIGN.md, layers 4-5): genesis's
# own backends and genesis-cuda's runtime and kernels import, from genesis, just these.
_CONTRACT = ("genesis.backends", "genesis.dtypes", "genesis.op_declarations",
             "genesis.cuda",  # genesis.cuda: the error types a CUDA backend raises
             "genesis.atomic_write")  # (standard library only: files written crash-safely)
_BACKEND_SIDE = ("genesis.backends", "genesis_cuda")
# genesis-cuda's public functions behind ``genesis.cuda.*`` work on genesis tensors, and so
# does the callable its compile hook returns (the contract's ``compile_graph`` hands it
# tensors, and it runs unfused nodes through core's replay, genesis.compiler.replay).
_PLUGIN_API = {"genesis_cuda.api", "genesis_cuda.graphed_callables",
               "genesis_cuda.compiler.runner", "genesis_cuda.compiler.cuda_graph",
               "genesis_cuda.compiler.pool_outputs"}  # (hands out the replay's tensors)


def _within(mod: str, prefixes) -> bool:
    return any(mod == p or mod.startswith(p + ".") for p in prefixes)


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """``importer -> imported`` for each backend-side module importing genesis above the
    contract."""
    bad = []
    for mod, edges in sorted(graph.items()):
        if not _within(mod, _BACKEND_SIDE) or mod in _PLUGIN_API:
            continue
        for dep in sorted(edges):
            if _within(dep, ("genesis",)) and not _within(dep, _CONTRACT):
                bad.append(f"{mod} -> {dep}")
    return bad


def test_layer_rule_detects_an_upward_import():
    graph = {"genesis.backends.cpu": {"genesis.random", "genesis.dtypes"},
             "genesis_cuda.kernels.optim": {"genesis.backends.registry"},
             "genesis_cuda.api": {"genesis"}}
    assert layer_violations(graph) == ["genesis.backends.cpu -> genesis.random"]


def test_backends_import_only_the_contract():
    bad = layer_violations(import_graph())
    assert not bad, "backend-side modules importing genesis above the contract:\n" + \
        "\n".join(bad)


# Function-local imports of the repository's own modules that are lazy by design, and why.
# Any other one fails below: import at module level instead (and if that makes a circle, the
# code sits in the wrong layer). (importer, imported) -> reason.
_LAZY = {
    ("genesis", "genesis.serialization"): "genesis.save/load: checkpoint code on first use",
    ("genesis.autograd", "genesis.testing"):
        "gradcheck is genesis.testing's (above autograd), reached as torch.autograd.gradcheck",
    ("genesis_cuda.backend", "genesis_cuda.api"): "genesis.cuda's module imports the runtime",
    ("genesis_cuda.backend", "genesis_cuda.dlpack"): "ctypes structures, for DLPack users only",
    ("genesis_cuda.backend", "genesis_cuda.compiler.backend_hook"):
        "the compiler (Triton code generation) loads on the first genesis.compile on CUDA",
    ("genesis_cuda.backend", "genesis_cuda.kernels.parallel_compile"):
        "Triton's compile machinery loads on the first genesis.compile trace on CUDA",
    ("genesis.models.apps.model_dir", "genesis.models"):
        "the CLIs check a model directory before loading the model stack",
}


def _lazy_by_rule(importer: str, imported: str) -> bool:
    # genesis-cuda's kernel families import each other on first use (kernels/__init__.py),
    # and another distribution's optional package is imported only when used.
    if importer.startswith("genesis_cuda.kernels.") and imported.startswith("genesis_cuda."):
        return True
    # genesis-nn (genesis.nn, genesis.optim, genesis.amp, genesis.utils ...) never imports
    # genesis.distributed, lazily or not: distributed builds on nn, not the other way.
    return imported.startswith("genesis.distributed") and \
        not importer.startswith(("genesis.distributed", "genesis.nn.parallel")) and \
        not importer.startswith(_GENESIS_NN)


# genesis-nn's packages (genesis.nn.parallel excepted: genesis-distributed ships it).
_GENESIS_NN = ("genesis.nn", "genesis.optim", "genesis.amp", "genesis.utils",
               "genesis.profiler", "genesis.cuda.amp", "genesis.distributions")


def test_genesis_nn_never_imports_genesis_distributed():
    graph = import_graph()
    bad = [f"{mod} -> {dep}" for mod, deps in sorted(graph.items())
           if _within(mod, _GENESIS_NN) and not _within(mod, ("genesis.nn.parallel",))
           for dep in sorted(deps) if _within(dep, ("genesis.distributed",))]
    bad += [f"{a} imports {b} inside a function" for a, b in function_local_imports()
            if _within(a, _GENESIS_NN) and _within(b, ("genesis.distributed",))]
    assert not bad, "genesis-nn modules importing genesis.distributed:\n" + "\n".join(bad)


def function_local_imports() -> list[tuple[str, str]]:
    """(importer, imported) for each import of a repository module inside a function."""
    files = _module_files()
    found = []
    for mod, path in files.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        is_pkg = os.path.basename(path) == "__init__.py"
        package = mod if is_pkg else mod.rpartition(".")[0]
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    base = node.module or ""
                    if node.level:
                        parts = package.split(".")
                        parts = parts[:len(parts) - (node.level - 1)]
                        base = ".".join(parts + ([node.module] if node.module else []))
                    names = [f"{base}.{a.name}" if f"{base}.{a.name}" in files else base
                             for a in node.names]
                else:
                    continue
                found += [(mod, n) for n in names if n in files or n.startswith("genesis")]
    return sorted(set(found))


def test_function_local_imports_are_lazy_by_design():
    stray = [f"{a} imports {b} inside a function"
             for a, b in function_local_imports()
             if (a, b) not in _LAZY and not _lazy_by_rule(a, b)]
    assert not stray, "\n".join(stray)

