"""Import contracts, read statically from the source (function-level, lazy imports included): the layers of
docs/DESIGN.md stay layers. A runtime check would miss a lazy import in a branch no test takes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "gpuaudit"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, me: str | None = None) -> set[str]:
    """Every module `path` (module `me`) imports, anywhere in the file (top level, functions, TYPE_CHECKING)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    me = me or _module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{a.name}" for a in node.names)  # `from gpuaudit import cli`
    return out


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(SRC.rglob("*.py"))}


def _area(module: str) -> str:
    """The top-level area of a gpuaudit module: `gpuaudit.store.reader` -> `store`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _areas() -> set[str]:
    return {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()} | {
        p.stem for p in SRC.glob("*.py") if p.stem != "__init__"}


# (importing area, forbidden prefix): the layering rules of docs/DESIGN.md.
FORBIDDEN = [
    *[(area, "gpuaudit.cli") for area in ("analysis", "report", "agent", "importer", "store", "push", "sim", "util",
                                          "selftest")],
    ("agent", "gpuaudit.selftest"),
    ("sim", "gpuaudit.selftest"),
    ("store", "gpuaudit.analysis"),
    ("store", "gpuaudit.report"),
    ("analysis", "pynvml"),
    ("analysis", "typer"),
    ("report", "pynvml"),
    ("report", "typer"),
    ("util", "gpuaudit.analysis"),
    ("util", "gpuaudit.store"),
]


@pytest.mark.parametrize(("area", "forbidden"), FORBIDDEN, ids=[f"{a}-not-{f}" for a, f in FORBIDDEN])
def test_an_area_never_imports_what_its_layer_forbids(area: str, forbidden: str) -> None:
    bad = sorted(f"{mod} imports {imp}" for mod, imps in _graph().items() if _area(mod) == area
                 for imp in imps if imp == forbidden or imp.startswith(forbidden + "."))
    assert not bad, "\n".join(bad)


def test_no_import_cycle_between_areas() -> None:
    """The areas (store, analysis, report, agent, ...) form a DAG: a cycle means two concerns share a room."""
    edges: dict[str, set[str]] = {}
    for mod, imps in _graph().items():
        src = _area(mod)
        for imp in imps:
            if imp.startswith("gpuaudit."):
                dst = _area(imp)
                if dst and src and dst != src and dst in _areas():
                    edges.setdefault(src, set()).add(dst)
    cycles = []
    for start in edges:
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in edges.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join([*path, start]))
                elif nxt not in path:
                    stack.append((nxt, [*path, nxt]))
    assert not cycles, "\n".join(sorted(set(cycles))[:20])


def test_the_contract_reader_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The checker itself: an import inside a function body, or a relative one, counts (a contract that missed
    them could not fail)."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    import typer\n    from ...cli import _common\n")
    got = _imports(probe, "gpuaudit.analysis.stage1.probe")
    assert {"typer", "gpuaudit.cli", "gpuaudit.cli._common"} <= got


def test_package_docstrings_name_only_modules_that_exist() -> None:
    """Issue 24 (rooms): a package docstring that names `x.py` names a module of that package, or `area/x.py` one
    under src/gpuaudit: a guide to the room must not point at a module that was moved or removed."""
    import re

    bad = []
    for init in sorted(SRC.rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        for name in sorted(set(re.findall(r"([\w/]+)\.py\b", doc))):
            if not any((base / f"{name}.py").exists() for base in (init.parent, SRC, SRC.parent)):
                bad.append(f"{init.relative_to(SRC)} names {name}.py")
    assert not bad, "\n".join(bad)


def _module_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Cycles between modules of one package, every import counted (a function-level import only hides a
    cycle from the interpreter, not from the design). Package `__init__` modules are left out: importing a
    sibling through its package is how a package is used, not a cycle."""
    modules = {m for m, _ in graph.items() if (SRC.parent / (m.replace(".", "/") + ".py")).exists()}
    edges = {m: {i for i in graph[m] if i in modules and i != m and i.rpartition(".")[0] == m.rpartition(".")[0]}
             for m in modules}
    cycles = set()
    for start in sorted(edges):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in edges[node]:
                if nxt == start:
                    i = path.index(min(path))
                    cycles.add(" -> ".join([*path[i:], *path[:i], path[i]]))
                elif nxt not in path and nxt > start:
                    stack.append((nxt, [*path, nxt]))
    return sorted(cycles)


# Cycles tolerated while they are being broken (none now); one that disappears must leave this list.
KNOWN_CYCLES: set[str] = set()


def test_no_import_cycle_between_modules_of_a_package() -> None:
    """Issue 24 (rooms): inside a package the modules form a DAG too; a shared piece belongs to its owner."""
    cycles = _module_cycles(_graph())
    new = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "\n".join(new)
    assert set(cycles) == KNOWN_CYCLES, f"no longer a cycle, remove from KNOWN_CYCLES: {KNOWN_CYCLES - set(cycles)}"


def test_the_cycle_reader_sees_a_cycle_hidden_in_a_function() -> None:
    graph = {"gpuaudit.util.fmt": {"gpuaudit.util.paths"}, "gpuaudit.util.paths": {"gpuaudit.util.fmt"}}
    assert _module_cycles(graph) == ["gpuaudit.util.fmt -> gpuaudit.util.paths -> gpuaudit.util.fmt"]
