"""Study pages from markdown templates: a study's ``page.md`` holds the prose of its pages, with placeholders
for the values of its store, so that the pages need no code of their own.

``page.md`` is cut into blocks by lines ``<!-- block NAME -->`` (text before the first is a comment). A block
named ``results`` is the README's results block; a name with a ``/`` is a block of a docs page
(``docs/rnn.md#sections``: the ``rnn_attention:sections`` block of docs/rnn.md; no ``#``: the whole page); any
other name only serves ``{% include NAME %}``, as do the blocks of the files that lines ``<!-- blocks FILE -->`` name
(relative to the template: pages that share their prose). In a block:

- ``{{ expr }}`` is replaced by the value of ``expr``, a Python expression over the study's names (the store's
  ``detail``, its entries by name, the study's ``context``, the helpers below); a mapping's keys read as
  attributes. ``{{ expr :spec }}`` formats it by ``spec``, a format spec (``,.0f``) or a helper's name
  (``seconds``, ``nbytes``, ``run``, ``pct``). None is shown as "—".
- a line ``{% for x in expr %}`` (``expr`` may end in ``if cond``), ``{% if expr %}``, ``{% else %}``,
  ``{% end %}`` or ``{% include NAME %}``, alone on its line, repeats, keeps or inserts the lines it encloses;
  ``{% join %}`` ... ``{% end %}`` joins the lines it makes into one (a paragraph whose parts vary).
"""

from __future__ import annotations

import builtins
import re
from pathlib import Path
from typing import Any

from .stats import mean_std, nbytes, run_line, seconds

BLOCK = re.compile(r"^<!-- block (\S+) -->$")
USE = re.compile(r"^<!-- blocks (\S+) -->$")
TAG = re.compile(r"^\{%\s*(\w+)\s*(.*?)\s*%\}$")
PLACE = re.compile(r"\{\{(.*?)\}\}")
SPEC = re.compile(r"^(.*[^:]):\s*([\w,.%<>^=+\- #]*?)\s*$", re.S)
SAFE = {k: getattr(builtins, k) for k in ("abs", "all", "any", "dict", "enumerate", "format", "len", "list", "max",
                                          "min", "range", "round", "set", "sorted", "str", "sum", "zip")}


def pct(v: float | None, digits: int = 1) -> str:
    return "—" if v is None else f"{100 * v:.{digits}f}%"


HELPERS = {"seconds": seconds, "nbytes": nbytes, "run": run_line, "pct": pct, "mean_std": mean_std}


class Data(dict):  # type: ignore[type-arg]
    """A store's mapping whose keys read as attributes too, its values wrapped alike."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __getitem__(self, key: Any) -> Any:
        return wrap(super().__getitem__(key))

    def get(self, key: Any, default: Any = None) -> Any:
        return wrap(super().get(key, default))

    def values(self) -> Any:
        return [wrap(v) for v in super().values()]

    def items(self) -> Any:
        return [(k, wrap(v)) for k, v in super().items()]


def wrap(v: Any) -> Any:
    if isinstance(v, dict) and not isinstance(v, Data):
        return Data(v)
    return [wrap(x) for x in v] if isinstance(v, list) else v


def _eval(expr: str, names: dict[str, Any]) -> Any:
    return eval(expr, {**names, "__builtins__": SAFE})  # a template of the repository, never user input


def _value(inner: str, names: dict[str, Any]) -> str:
    m = SPEC.match(inner)
    expr, spec = (m.group(1), m.group(2)) if m else (inner, "")
    v = _eval(expr.strip(), names)
    return "—" if v is None else HELPERS[spec](v) if spec in HELPERS else format(v, spec)


def _parse(lines: list[str], i: int = 0) -> tuple[list[Any], int, str | None]:
    nodes: list[Any] = []
    while i < len(lines):
        m, i = TAG.match(lines[i].strip()), i + 1
        if not m:
            nodes.append(lines[i - 1])
            continue
        tag, arg = m.groups()
        if tag in ("end", "else"):
            return nodes, i, tag
        body: list[Any] = []
        orelse: list[Any] = []
        if tag != "include":
            body, i, stop = _parse(lines, i)
            if stop == "else":
                orelse, i, stop = _parse(lines, i)
        nodes.append((tag, arg, body, orelse))
    return nodes, i, None


def _run(nodes: list[Any], names: dict[str, Any], blocks: dict[str, list[Any]]) -> list[str]:
    out: list[str] = []
    for node in nodes:
        if isinstance(node, str):
            out.append(PLACE.sub(lambda m: _value(m.group(1), names), node))
            continue
        tag, arg, body, orelse = node
        if tag == "include":
            out += _run(blocks[arg], names, blocks)
        elif tag == "join":
            out.append("".join(_run(body, names, blocks)))
        elif tag == "if":
            out += _run(body if _eval(arg, names) else orelse, names, blocks)
        elif tag == "for":
            target, expr = arg.split(" in ", 1)
            keys = [t.strip() for t in target.split(",")]
            for values in _eval(f"[({target},) for {target} in {expr}]", names):
                out += _run(body, {**names, **dict(zip(keys, values))}, blocks)
        else:
            raise ValueError(f"unknown template tag {tag!r}")
    return out


def _blocks(path: Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """The blocks of the template file ``path``, and those of the files it names to include."""
    blocks: dict[str, list[str]] = {}
    used: dict[str, list[str]] = {}
    name = None
    for line in path.read_text().splitlines():
        m, use = BLOCK.match(line), USE.match(line)
        if use:
            used.update({k: v for part in _blocks(path.parent / use.group(1)) for k, v in part.items()})
        elif m:
            name = m.group(1)
            blocks[name] = []
        elif name is not None:
            blocks[name].append(line)
    return blocks, used


def pages(template: Path, detail: dict[str, Any], context: dict[str, Any] | None = None) -> dict[str, list[str]]:
    """The page blocks of ``template`` (``results`` and those of docs pages) rendered from ``detail`` (a store's
    detail) and ``context`` (more names)."""
    own, used = _blocks(template)
    parsed = {k: _parse(v)[0] for k, v in {**used, **own}.items()}
    names = {**HELPERS, **{k: wrap(v) for k, v in {**detail, **(context or {})}.items()}, "detail": wrap(detail)}
    return {k: _run(parsed[k], names, parsed) for k in own if k == "results" or "/" in k}
