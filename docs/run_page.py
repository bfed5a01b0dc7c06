"""Run a docs page as a script: its ```python blocks in order, in one namespace.

Usage (from the repository root)::

    .venv/bin/python docs/run_page.py docs/tutorials/custom_mask.md
    .venv/bin/python docs/run_page.py --check docs/tutorials/custom_mask.md   # also compare the outputs

A ```text block right after a python block (nothing but blank lines between them) is that block's
exact printed output; ``--check`` stops at the first block that prints something else. The tests
(tests/test_docs.py) run the tutorials and guides this way.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from pathlib import Path

#: A fenced block: its language and body (fences of three backticks at line start).
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)


def blocks(text: str) -> list[tuple[str, str, str | None, int]]:
    """The python blocks of a page as (language, code, expected output or None, line number)."""
    found = [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]
    out = []
    for i, (lang, body, start, end) in enumerate(found):
        if lang != "python":
            continue
        expected = None
        if i + 1 < len(found) and found[i + 1][0] == "text" and not text[end : found[i + 1][2]].strip():
            expected = found[i + 1][1]
        out.append((lang, body, expected, text.count("\n", 0, start) + 1))
    return out


def run_page(path: str | Path, check: bool = True, echo: bool = False) -> dict[str, object]:
    """Execute the python blocks of the page at ``path``; return the namespace they ran in.

    Args:
        path (str or Path): the Markdown page.
        check (bool, optional): raise ``AssertionError`` when a block's output differs from the
            text block after it. (default: :obj:`True`)
        echo (bool, optional): also print each block's output. (default: :obj:`False`)
    """
    path = Path(path)
    found = blocks(path.read_text())
    if not found:
        raise ValueError(f"{path} has no ```python blocks")
    namespace: dict[str, object] = {"__name__": f"docs.{path.stem}"}
    for _, code, expected, line in found:
        stdout = io.StringIO()
        with contextlib.redirect_stdout(stdout):
            try:
                exec(compile(code, f"{path}:{line}", "exec"), namespace)
            except Exception as err:
                raise AssertionError(f"the python block at {path}:{line} fails: {err!r}") from err
        if echo:
            print(stdout.getvalue(), end="")
        if check and expected is not None and stdout.getvalue().rstrip() != expected.rstrip():
            raise AssertionError(
                f"the text block after {path}:{line} is not that block's output; it printed:\n{stdout.getvalue()}"
            )
    return namespace


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="the Markdown page to run")
    parser.add_argument("--check", action="store_true", help="compare each block's output with its text block")
    args = parser.parse_args(argv)
    run_page(args.page, check=args.check, echo=True)
    checked = " and printed its text block" if args.check else ""
    print(f"{args.page}: every python block ran{checked}", file=sys.stderr)


if __name__ == "__main__":
    main()
