"""Print the import cycles (strongly connected components) of a package, counting every import.

Every ``import``/``from ... import`` statement counts, at module level or inside a function or class.
A name imported from a package whose ``__init__`` re-exports it is traced to the module that defines
it, so a package's ``__init__`` does not tie its submodules into one knot.

    python tools/import_graph.py [attnmm] [--edges]
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def _modules(root: Path) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _absolute(module: str, is_package: bool, level: int, target: str | None) -> str:
    if level == 0:
        return target or ""
    base = module.split(".")
    base = base if is_package else base[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


def _reexports(modules: dict[str, Path]) -> dict[str, dict[str, str]]:
    """For each package: the names its ``__init__`` imports at module level, and from where."""
    out: dict[str, dict[str, str]] = {}
    for name, path in modules.items():
        if path.name != "__init__.py":
            continue
        table = {}
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom):
                source = _absolute(name, True, node.level, node.module)
                for alias in node.names:
                    table[alias.asname or alias.name] = f"{source}.{alias.name}"
        out[name] = table
    return out


def _resolve(dotted: str, modules: dict[str, Path], reexports, depth: int = 0) -> str | None:
    """The module that defines ``dotted`` (a module path or ``module.name``), inside the package."""
    if dotted in modules:
        return dotted
    if "." not in dotted or depth > 20:
        return None
    owner, name = dotted.rsplit(".", 1)
    if owner in reexports and name in reexports[owner]:
        return _resolve(reexports[owner][name], modules, reexports, depth + 1)
    return owner if owner in modules else _resolve(owner, modules, reexports, depth + 1)


def graph(root: Path) -> dict[str, set[str]]:
    modules = _modules(root)
    reexports = _reexports(modules)
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                source = _absolute(name, is_package, node.level, node.module)
                targets = [f"{source}.{alias.name}" for alias in node.names if alias.name != "*"]
                targets = targets or [source]
            for target in targets:
                resolved = _resolve(target, modules, reexports)
                if resolved and resolved != name:
                    edges[name].add(resolved)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out = []
    counter = 0
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        item = stack.pop()
                        on_stack.discard(item)
                        component.append(item)
                        if item == node:
                            break
                    if len(component) > 1:
                        out.append(sorted(component))
    return sorted(out, key=len, reverse=True)


def main(argv: list[str]) -> int:
    args = [a for a in argv if not a.startswith("--")]
    root = Path(args[0] if args else "attnmm")
    edges = graph(root)
    if "--edges" in argv:
        for name in sorted(edges):
            print(name, "->", ", ".join(sorted(edges[name])))
    found = cycles(edges)
    for component in found:
        print(f"cycle of {len(component)}: " + ", ".join(component))
    print(f"{len(found)} cycle(s) among {len(edges)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
