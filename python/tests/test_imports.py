"""The package's modules import each other without a cycle, counting the imports inside
functions too: a cycle works only while one side's import stays inside a function, and
makes which module loads first matter (model.py and torch_interop.py had one: Model.to_torch
imported torch_interop, whose from_torch imported Model)."""
import ast
import os

import dptrain

PKG = os.path.dirname(os.path.abspath(dptrain.__file__))


def package_imports():
    """{module: {modules of the package it imports anywhere in its code}}."""
    mods = {f[:-3] for f in os.listdir(PKG) if f.endswith(".py")}
    graph = {}
    for m in sorted(mods):
        with open(os.path.join(PKG, m + ".py")) as f:
            tree = ast.parse(f.read())
        deps = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or node.module == "dptrain" or
                                                     (node.module or "").startswith("dptrain.")):
                sub = node.module if node.level == 1 else (node.module or "").partition(".")[2]
                if sub:  # from .x import y / from dptrain.x import y
                    deps.add(sub.split(".")[0])
                else:  # from . import x: a module, or a name of the package's __init__
                    deps.update(a.name if a.name in mods else "__init__" for a in node.names)
            elif isinstance(node, ast.Import):  # import dptrain[.x]
                deps.update((a.name.split(".") + ["__init__"])[1] for a in node.names
                            if a.name.split(".")[0] == "dptrain")
        graph[m] = {d for d in deps if d in mods and d != m}
    return graph


def find_cycle(graph):
    """A list [a, b, ..., a] of modules importing each other in a circle, or None."""
    state = {}  # module -> 1 on the current path, 2 done

    def visit(m, path):
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                return path[path.index(d):] + [d]
            if d not in state:
                c = visit(d, path + [d])
                if c:
                    return c
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            c = visit(m, [m])
            if c:
                return c
    return None


def test_no_import_cycle():
    graph = package_imports()
    assert "torch_interop" in graph["model"]  # the scan sees imports (Model.to_torch's module)
    cycle = find_cycle(graph)
    assert cycle is None, "the modules of dptrain import each other in a circle: %s" % " -> ".join(cycle)


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None
