"""The kvtier package's modules import in one direction: the engine-neutral parts (_engine,
_options, the host-pool handling) below, the engines' adapters (sglang, vllm_tier) on top.

Read from the source with ast, not by importing it: every import counts, also one inside a
function or under `if TYPE_CHECKING:`, since each is an arrow a reader follows."""

import ast
import os

import pytest

PACKAGE = "kvtier"
PACKAGE_DIR = os.path.join(os.path.dirname(__file__), "..", PACKAGE)
# The engines' adapters: the top of the package, imported by none of its modules.
ADAPTERS = {"sglang", "vllm_tier"}


def modules(directory=PACKAGE_DIR):
    """{module name ('__init__' for the package itself): path} of the package's sources."""
    return {name[:-3]: os.path.join(directory, name)
            for name in sorted(os.listdir(directory)) if name.endswith(".py")}


def imported(path, names):
    """The package's modules that the source at `path` imports (`names`: those that exist)."""
    out = set()
    with open(path) as f:
        tree = ast.parse(f.read(), filename=path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == PACKAGE:
                    out.add(parts[1] if len(parts) > 1 and parts[1] in names else "__init__")
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from ._engine import y
                base = node.module.split(".")[0] if node.module else None
            elif node.module and node.module.split(".")[0] == PACKAGE:
                parts = node.module.split(".")
                base = parts[1] if len(parts) > 1 else None
            else:
                continue
            if base is not None:
                out.add(base if base in names else "__init__")
            else:  # from kvtier import _options: a submodule, or a name of the package's own
                for alias in node.names:
                    out.add(alias.name if alias.name in names else "__init__")
    return out


def graph(directory=PACKAGE_DIR):
    sources = modules(directory)
    return {name: imported(path, sources) - {name} for name, path in sources.items()}


def find_cycle(edges):
    """One import cycle as a list of modules (first repeated at the end), or None."""
    state = {}  # name -> "open" while on the walk's stack, "done" after

    def visit(name, stack):
        state[name] = "open"
        stack.append(name)
        for nxt in sorted(edges.get(name, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, stack)
                if found:
                    return found
        stack.pop()
        state[name] = "done"
        return None

    for name in sorted(edges):
        if name not in state:
            found = visit(name, [])
            if found:
                return found
    return None


def test_the_package_has_no_import_cycle():
    edges = graph()
    assert {"_engine", "_options", "sglang", "vllm_tier"} <= set(edges), sorted(edges)
    cycle = find_cycle(edges)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_no_module_imports_an_engine_adapter():
    edges = graph()
    up = {(name, top) for name, targets in edges.items() for top in targets & ADAPTERS}
    assert not up, f"modules that import an engine's adapter (the top): {sorted(up)}"


def test_the_engine_neutral_parts_import_only_the_package_itself():
    edges = graph()
    for neutral in ("_engine", "_options"):
        assert edges[neutral] <= {"__init__"}, (neutral, sorted(edges[neutral]))


@pytest.mark.parametrize("source, cycle", [
    # Each kind of import the walk must see, closing a cycle a -> b -> a.
    ({"a": "from kvtier import b\n", "b": "import kvtier.a\n"}, ["a", "b", "a"]),
    ({"a": "from kvtier.b import x\n",
      "b": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from kvtier.a import A\n"},
     ["a", "b", "a"]),
    ({"a": "def f():\n    from .b import x\n", "b": "from . import a\n"}, ["a", "b", "a"]),
    ({"__init__": "from kvtier.a import x\n", "a": "import kvtier\n"},
     ["__init__", "a", "__init__"]),
    ({"a": "from kvtier import b\n", "b": "import numpy\nimport kvtier._kvtier\n"}, None),
])
def test_the_walk_finds_a_cycle_through_each_kind_of_import(tmp_path, source, cycle):
    for name, text in source.items():
        (tmp_path / (name + ".py")).write_text(text)
    assert find_cycle(graph(str(tmp_path))) == cycle
