"""The package's layers: no import cycle, the import-linter contracts kept, no cached state at module level,
the old import paths of moved modules and names warn and name the new one."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "attnmm"


def _import_graph():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("import_graph", ROOT / "tools" / "import_graph.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycle() -> None:
    # every import counted, at module level and inside functions, re-exported names traced to their module
    graph = _import_graph()
    assert graph.cycles(graph.graph(PACKAGE)) == []


def test_the_import_graph_sees_function_level_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg.a import f\n")
    (pkg / "a.py").write_text("def f():\n    from pkg import b\n    return b\n")
    (pkg / "b.py").write_text("from pkg import f\n")  # a re-exported name: traced to pkg.a
    graph = _import_graph()
    assert graph.cycles(graph.graph(pkg)) == [["pkg.a", "pkg.b"]]


def test_the_import_contracts_are_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    if not lint.exists():
        pytest.skip("import-linter is not installed (the dev extra)")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    assert "0 broken" in done.stdout


def _module_level_caches(path: Path) -> list[str]:
    """``global`` statements, memoising decorators, and empty mutable containers bound at module level."""
    found = []
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append(f"{path}:{node.lineno}: global {', '.join(node.names)}")
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                if text.endswith(("functools.cache", "lru_cache", "lru_cache()")) or text in ("cache",):
                    found.append(f"{path}:{node.lineno}: @{text}")
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if value is None:
            continue
        empty_literal = isinstance(value, (ast.Dict, ast.List, ast.Set)) and not (
            getattr(value, "keys", None) or getattr(value, "elts", None)
        )
        made = isinstance(value, ast.Call) and ast.unparse(value.func).split(".")[-1] in (
            "OrderedDict", "dict", "defaultdict", "WeakKeyDictionary", "WeakValueDictionary", "set", "list",
        )
        if empty_literal or made:
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_cached_state_at_module_level() -> None:
    # derived state lives in a plan, a store owned by a layer, or on the backend object that uses it
    found = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _module_level_caches(path)]
    assert found == []


def test_the_scan_finds_module_level_caches(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import functools\nfrom collections import OrderedDict\n_entries = OrderedDict()\n_seen = {}\n"
        "TABLE = {'a': 1}\n@functools.cache\ndef f():\n    global _x\n"
    )
    assert len(_module_level_caches(source)) == 4  # the table of constants is not a cache


MOVED_MODULES = [
    ("attnmm.attention.encoder", "attnmm.nn.encoder"),
    ("attnmm.attention.multihead", "attnmm.nn.multihead"),
    ("attnmm.attention.positional", "attnmm.nn.positional"),
    ("attnmm.attention.relative", "attnmm.nn.relative"),
    ("attnmm.attention.state", "attnmm.nn.state"),
    ("attnmm.attention.plan", "attnmm.attention.planner"),
    ("attnmm.attention._problem", "attnmm.attention.problem"),
    ("attnmm.attention._dispatch", "attnmm.attention.planner"),
    ("attnmm.attention._memory", "attnmm.attention.backends._memory"),
    ("attnmm.attention._split", "attnmm.attention.backends._split"),
    ("attnmm.data.vocab", "attnmm.common.vocab"),
    ("attnmm.nn.categorical", "attnmm.common.categorical"),
    ("attnmm.masks.feature_knn", "attnmm.common.feature_knn"),
]


@pytest.mark.parametrize(("old", "new"), MOVED_MODULES)
def test_an_old_module_path_warns_and_stands_for_the_new(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(FutureWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


@pytest.mark.parametrize(
    "name", ["Encoder", "EncoderLayer", "MultiHeadAttention", "SinusoidalPE", "RotaryPE", "IncrementalState",
             "RelativePositionBias"],
)
def test_an_old_name_in_the_core_warns_and_is_the_layer(name: str) -> None:
    import attnmm.attention
    import attnmm.nn

    with pytest.warns(FutureWarning, match=rf"attnmm\.nn\.{name}"):
        found = getattr(attnmm.attention, name)
    assert found is getattr(attnmm.nn, name)
    with pytest.raises(AttributeError):
        attnmm.attention.NoSuchName  # noqa: B018


@pytest.mark.slow  # a new interpreter per path; in the quick loop: the old paths' warnings, above
def test_the_new_paths_import_without_warnings() -> None:
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import attnmm, attnmm.nn, attnmm.adapters, attnmm.data, attnmm.common, attnmm.lightning, attnmm.viz\n"
        "from attnmm.nn import Encoder, MultiHeadAttention\nfrom attnmm.attention import Plan, attend\n"
    )
    with warnings.catch_warnings():
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
