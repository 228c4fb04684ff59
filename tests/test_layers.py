"""The package's import structure: no circle among its modules, and no import from a lower layer
to a higher one. Read from the source with :mod:`ast` (every ``import`` of an ``autodeuq``
module, at module level or inside a function; those under ``if TYPE_CHECKING:`` are left out):
a function-level import that runs up the layers is a dependency all the same.

:data:`LAYERS` is where the layers are defined (docs/architecture.md describes them).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from autodeuq._lazy import MOVED, moved_to

PACKAGE = Path(__file__).resolve().parent.parent / "autodeuq"

#: The layers, lowest first: a module may import modules of its own layer and of the layers below.
#: Each module belongs to the layer one of whose prefixes it starts with (a prefix names a folder,
#: or a module, and everything in it): one folder per layer, but for the three top-level modules
#: of the tasks' scores and report (a tasks/ folder is the next step).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The package itself imports nothing (its names are resolved lazily): any layer may read its version.
    ("core", ("autodeuq", "autodeuq._lazy", "autodeuq.core")),
    ("table", ("autodeuq.table", "autodeuq.metrics")),
    ("nn", ("autodeuq.nn",)),
    # A task names its parts in the layers above (its ensemble's class, its report) by "module:attribute"
    # strings (autodeuq.tasks.base): the catalog, the ensemble and the application ask it.
    ("tasks", ("autodeuq.tasks",)),
    ("search", ("autodeuq.search", "autodeuq.discard")),
    ("catalog", ("autodeuq.catalog",)),
    ("engine", ("autodeuq.engine",)),
    ("ensemble", ("autodeuq.ensemble",)),
    ("app", ("autodeuq.app", "autodeuq.report", "autodeuq.classification_metrics", "autodeuq.__main__")),
)
#: The top-level modules of the package, besides its __init__ and __main__ (issue 65: at most 6).
TOP_LEVEL = {"_lazy", "metrics", "classification_metrics", "report"}

#: Imports known to close a circle, left out of the circle check until they are gone (the list only
#: shrinks; issue 65 emptied it: the ensemble's member sources and errors moved to
#: ``ensemble.members``, which building, saving and loading import instead of ``ensemble.predictive``,
#: and the manifest's field checks to ``ensemble.manifest_fields``, which ``onnx_members`` reads).
KNOWN_CIRCLES: frozenset[tuple[str, str]] = frozenset()


def modules() -> dict[str, Path]:
    """Module name -> source file, of every module of the package."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_nodes(tree) -> set[int]:
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for child in node.body for n in ast.walk(child))
    return skipped


def imports(known: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a name imported from a package counts as its
    submodule when there is one, else as the package)."""

    def owner(name):
        name = moved_to(name) or name  # a former name (autodeuq._lazy.MOVED) stands for the module now
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name

    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                found.update(owner(a.name) for a in node.names if a.name.split(".")[0] == "autodeuq")
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                if base.split(".")[0] != "autodeuq":
                    continue
                for alias in node.names:
                    full = moved_to(f"{base}.{alias.name}") or f"{base}.{alias.name}"
                    found.add(full if full in known else owner(base))
        found.discard(name)
        found.discard("")
        graph[name] = found
    return graph


def layer_of(module: str) -> int:
    if module == "autodeuq":
        return 0
    for index, (_, prefixes) in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes if p != "autodeuq"):
            return index
    raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
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
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph():
    return imports(modules())


def test_every_module_has_a_layer(graph):
    for module in graph:
        layer_of(module)


def test_no_import_runs_up_the_layers(graph):
    upward = sorted(f"{a} ({LAYERS[layer_of(a)][0]}) imports {b} ({LAYERS[layer_of(b)][0]})"
                    for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))
    assert not upward, "imports from a lower layer to a higher one:\n" + "\n".join(upward)


def test_no_import_circles(graph):
    pruned = {a: {b for b in targets if (a, b) not in KNOWN_CIRCLES} for a, targets in graph.items()}
    found = circles(pruned)
    assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_known_circles_are_still_there(graph):
    # An entry of KNOWN_CIRCLES that no longer exists is to be removed (the list only shrinks).
    gone = sorted(f"{a} -> {b}" for a, b in KNOWN_CIRCLES if b not in graph.get(a, ()))
    assert not gone, "imports gone, remove them from KNOWN_CIRCLES:\n" + "\n".join(gone)


def test_the_check_finds_a_circle_and_an_upward_import():
    # The check itself: a toy graph with one circle and one import up the layers.
    toy = {"autodeuq.table.data": {"autodeuq.table.preprocess"}, "autodeuq.table.preprocess": {"autodeuq.table.data"},
           "autodeuq.core.errors": {"autodeuq.app.cli"}, "autodeuq.app.cli": set()}
    assert circles(toy) == [["autodeuq.table.data", "autodeuq.table.preprocess"]]
    assert layer_of("autodeuq.core.errors") < layer_of("autodeuq.app.cli")
    assert layer_of("autodeuq.ensemble.predictive") == layer_of("autodeuq.ensemble")
    # A former name counts as the module it stands for.
    assert moved_to("autodeuq.data") == "autodeuq.table.data" and layer_of(moved_to("autodeuq.data")) == 1


def test_at_most_six_top_level_modules():
    found = {p.stem for p in PACKAGE.glob("*.py")} - {"__init__", "__main__"}
    assert found == TOP_LEVEL, f"top-level modules: {sorted(found)}; put a new one in its layer's folder"


def test_the_former_names_lead_to_modules_that_exist(graph):
    for old, new in MOVED.items():
        assert new in graph, f"{old} -> {new}, which is not a module of the package"
        assert old not in graph, f"{old} is both a module and a former name"


#: Modules still importing moved modules by their former names (issue 66's files; the names work
#: through autodeuq._lazy.MOVED): to be emptied as they are updated. Nothing else may.
FORMER_NAMES_USED_BY: tuple[str, ...] = ()


def test_the_package_imports_its_modules_by_their_new_names():
    offenders = []
    for name, path in modules().items():
        if any(name == p or name.startswith(p + ".") for p in FORMER_NAMES_USED_BY):
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            offenders += [f"{name}: {t}" for t in targets if t.startswith("autodeuq.") and moved_to(t)]
    assert not offenders, "imports by a former name:\n" + "\n".join(offenders)
