"""A griffe extension for the API pages: the reST bits of attnmm's Google-style docstrings as Markdown.

attnmm's docstrings follow PyG's conventions: ``.. math::`` blocks, ``:math:`...``` and cross-reference
roles (``:class:`~attnmm.masks.Window```), ``Shapes:`` sections. mkdocstrings renders Markdown, so
before the docstrings are parsed this extension rewrites

- ``.. math::`` blocks and ``:math:`...``` to ``$$ ... $$`` and ``$...$`` (rendered by arithmatex and
  MathJax);
- ``:class:``, ``:func:``, ``:meth:``, ``:attr:``, ``:mod:``, ``:data:``, ``:obj:``, ``:exc:`` roles to
  links to the API pages when the target is documented there, else to plain code; a target that does
  not exist at all (a typo, a renamed class) stays a required cross-reference, so the strict build
  fails on it;
- a ``Shapes:`` section to a bold heading and its list.

The docstrings in the source stay as they are (they also serve ``help()`` and the doctests).
"""

from __future__ import annotations

import importlib
import re
import textwrap
from functools import cache
from typing import Any

from griffe import Extension, Object

ROLE = re.compile(r":(?:py:)?(class|func|meth|attr|mod|data|obj|exc):`(~?)([^`]+)`")
MATH_ROLE = re.compile(r":math:`([^`]+)`")


DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


@cache
def exists(target: str) -> bool:
    """Whether ``target`` (``package.module.Class.attr``) names an importable object."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except Exception:
            continue
        try:
            for name in parts[i:]:
                obj = getattr(obj, name)
        except AttributeError:
            return False
        return True
    return False


def _role(match: re.Match[str]) -> str:
    _, short, target = match.groups()
    target = target.strip()
    title = target.split(".")[-1] if short else target
    if not DOTTED.fullmatch(target):  # :obj:`None`, :obj:`0.0`, :class:`Tokens`: nothing to link by full path
        return f"`{title}`"
    optional = " optional" if exists(target) else ""  # a target that does not exist fails the strict build
    return f'<autoref identifier="{target}"{optional}><code>{title}</code></autoref>'


def _math_blocks(text: str) -> str:
    """``.. math::`` followed by an indented block -> a ``$$`` display block."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() != ".. math::":
            out.append(line)
            i += 1
            continue
        indent = len(line) - len(line.lstrip())
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        math = textwrap.dedent("\n".join(body)).strip()
        if "&" in math and "\\begin" not in math:
            math = "\\begin{aligned}\n" + math + "\n\\end{aligned}"
        pad = " " * indent
        out += ["", f"{pad}$$", *(pad + m for m in math.splitlines()), f"{pad}$$", ""]
    return "\n".join(out)


def _shapes(text: str) -> str:
    """A ``Shapes:`` section (Google style, unknown to the parser) -> a bold heading and its list."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "Shapes:":
            out.append(lines[i])
            i += 1
            continue
        indent = len(lines[i]) - len(lines[i].lstrip())
        body: list[str] = []
        i += 1
        while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        out += ["", "**Shapes:**", "", *textwrap.dedent("\n".join(body)).strip("\n").splitlines(), ""]
    return "\n".join(out)


def markdown(text: str) -> str:
    """The docstring ``text`` with its reST math, roles and Shapes section in Markdown."""
    text = _shapes(_math_blocks(text))
    text = MATH_ROLE.sub(lambda m: f"${m.group(1)}$", text)
    return ROLE.sub(_role, text)


class RestToMarkdown(Extension):
    """Rewrites every docstring with :func:`markdown` once the object tree is loaded."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
