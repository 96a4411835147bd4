"""The kernels' C sources as files (kernels/c/): what the build reads and hashes, what the package
ships, and the shape of their #include graph.  Nothing here compiles."""
from __future__ import annotations

import re
import shutil
import tomllib
from fnmatch import fnmatch
from pathlib import Path

from llamapy.kernels import build

ROOT = Path(__file__).resolve().parents[1]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
TOP_FUNCTION = re.compile(r"^(?!static|LP_INLINE|typedef|#)[A-Za-z][\w\s*]*?\b(lp_\w+)\(", re.M)  # a top-level prototype or definition


def _includes() -> dict[str, set[str]]:
    """file name -> the kernel files it #includes (quoted includes only)."""
    return {p.name: set(INCLUDE.findall(p.read_text())) for p in build.source_files()}


def test_every_part_is_hashed(tmp_path, monkeypatch):
    """A change in any file the build reads (a translation unit, a header, a part a unit includes
    whole) gives another cache key, so the library is rebuilt."""
    src = tmp_path / "c"
    shutil.copytree(build.SOURCE_DIR, src)
    monkeypatch.setattr(build, "SOURCE_DIR", src)
    names = {p.name for p in build.source_files()}
    assert {"mm.c", "lp.h", "q8mm_256.inc"} <= names
    key = build.library_path("cc", "scalar", "x86_64", frozenset())[0]
    for name in ("mm.c", "lp.h", "q8mm_256.inc"):
        with open(src / name, "a") as f:
            f.write("\n")
        changed = build.library_path("cc", "scalar", "x86_64", frozenset())[0]
        assert changed != key, name
        key = changed


def test_includes_name_kernel_files_and_the_package_ships_them():
    files = {p.name for p in build.SOURCE_DIR.iterdir() if p.is_file()}
    for name, incs in _includes().items():
        assert incs <= files, f"{name} includes {incs - files}"
    patterns = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["llamapy"]
    for p in build.source_files():
        rel = p.relative_to(build.SOURCE_DIR.parents[1]).as_posix()
        assert any(fnmatch(rel, pat) for pat in patterns), f"{rel} is not in pyproject's package-data"


def test_headers_form_no_circle():
    """No header includes itself through others; lp.h, the base, includes no kernel file, and
    .inc parts are included by their one translation unit alone."""
    graph = _includes()
    assert graph["lp.h"] == set()

    def reach(start: str) -> set[str]:
        seen: set[str] = set()
        todo = list(graph.get(start, ()))
        while todo:
            n = todo.pop()
            if n not in seen:
                seen.add(n)
                todo.extend(graph.get(n, ()))
        return seen

    for name in graph:
        assert name not in reach(name), f"{name} includes itself"
    for part in (n for n in graph if n.endswith(".inc")):
        users = [n for n, incs in graph.items() if part in incs]
        assert len(users) == 1 and users[0].endswith(".c"), (part, users)


def test_each_function_is_declared_by_its_own_file():
    """The prototypes of X.c's functions are in X.h (those of a part X.c includes whole too), never
    in lp.h or another file's header: the headers declare what their unit defines."""
    graph = _includes()
    unit = {n: n for n in graph if n.endswith(".c")}
    unit |= {part: next(n for n, incs in graph.items() if part in incs) for part in graph if part.endswith(".inc")}
    defined = {}
    for name, owner in unit.items():
        for fn in TOP_FUNCTION.findall((build.SOURCE_DIR / name).read_text()):
            defined.setdefault(fn, owner)
    assert "lp_mm_for" in defined and "lp_xprep_at" in defined
    for h in (p for p in build.source_files() if p.suffix == ".h"):
        for fn in TOP_FUNCTION.findall(h.read_text()):
            assert fn in defined, f"{h.name} declares {fn}, defined nowhere"
            assert defined[fn] == h.stem + ".c", f"{h.name} declares {fn} of {defined[fn]}"
