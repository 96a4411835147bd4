"""The package's shape (issue: the house): no import circle among llamapy's Python modules,
no file in src/llamapy over 400 lines.  Both walk the source as text (ast), so they see
every import, including those inside functions and under `if TYPE_CHECKING:`."""
from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PKG = SRC / "llamapy"
MAX_LINES = 400


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every .py under src/llamapy (a package is its __init__)."""
    out: dict[str, Path] = {}
    for p in sorted(PKG.rglob("*.py")):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        out[name.removesuffix(".__init__")] = p
    return out


def _imported(name: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The llamapy modules an import statement runs: `from a.b import c` runs a.b (and a.b.c
    when c is a module); relative imports are resolved against the importing module's package."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names} & known
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        base = ".".join(parts + ([node.module] if node.module else []))
    found = {base} | {f"{base}.{a.name}" for a in node.names}
    return found & known


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _imported(name, path, node, known)
        deps.discard(name)
        graph[name] = deps
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path a -> b -> .. -> a, or None (iterative DFS, colours)."""
    colour = {m: 0 for m in graph}  # 0 unseen, 1 on the stack, 2 done
    for root in sorted(graph):
        if colour[root]:
            continue
        stack: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        path = [root]
        colour[root] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                colour[node] = 2
                stack.pop()
                path.pop()
                continue
            nxt = todo.pop()
            if colour[nxt] == 1:
                return path[path.index(nxt):] + [nxt]
            if colour[nxt] == 0:
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(graph[nxt])))
    return None


def test_find_cycle_sees_a_planted_circle() -> None:
    """The walker itself can fail: a circle planted in a copy of the real graph is found."""
    graph = import_graph()
    assert "llamapy.gguf.reader" in graph and "llamapy.context" in graph
    graph = {k: set(v) for k, v in graph.items()}
    graph["llamapy.gguf.reader"].add("llamapy.context")
    cycle = find_cycle(graph)
    assert cycle is not None and cycle[0] == cycle[-1], cycle


def test_no_import_circles() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_no_file_over_400_lines() -> None:
    too_long = {
        str(p.relative_to(SRC)): n
        for p in sorted(PKG.rglob("*"))
        if p.is_file() and p.suffix in {".py", ".c", ".h", ".inc", ".cu", ".js", ".css", ".html"}
        and (n := len(p.read_text(errors="replace").splitlines())) > MAX_LINES
    }
    assert not too_long, f"files over {MAX_LINES} lines: {too_long}"
