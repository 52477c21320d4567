"""The installed package stands alone: nothing under src/ imports tools/ (our own machinery, not installed), and no
module of algo_emu imports one that imports it back (no import cycle, direct or through others, lazy imports
inside functions included). Read from the source text (ast), so a lazy import in a branch no test takes counts too."""

import ast
from pathlib import Path

from algo_emu.runtime import REPO_ROOT

SRC = REPO_ROOT / "src"


def _modules(src: Path = SRC) -> dict[str, Path]:
    out = {}
    for f in sorted(src.rglob("*.py")):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = f
    return out


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """Every module ``name`` imports anywhere in its text (``from pkg import sub`` is the module ``pkg.sub``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return found - {name}


def _graph(src: Path = SRC) -> dict[str, set[str]]:
    known = _modules(src)
    return {m: _imports(m, p, known) for m, p in known.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), among the graph's own modules."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v] & graph.keys():
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_nothing_under_src_imports_tools():
    graph = _graph()
    assert len(graph) > 50  # the whole package was read
    bad = {m: sorted(i for i in imps if i == "tools" or i.startswith("tools.")) for m, imps in graph.items()}
    assert not {m: i for m, i in bad.items() if i}, "src/ must not import tools/ (not installed)"


def test_no_module_of_algo_emu_imports_one_that_imports_it_back():
    assert _cycles(_graph()) == []


def test_the_checks_see_a_cycle_and_an_import_of_tools(tmp_path):
    """Negative control: a package with a lazy cycle through a third module, and a lazy import of tools."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("def g():\n    import pkg.a\n    from tools.campaign import core\n")
    (pkg / "d.py").write_text("from pkg import a\n")  # imports the cycle, is not in it
    graph = _graph(tmp_path)
    assert _cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert "tools.campaign" in graph["pkg.c"]
