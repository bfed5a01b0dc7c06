"""A process that runs recipe scripts in forked children, for the tests: ``python recipes/<name>.py`` without
paying for the interpreter's start and the imports of torch, Lightning, PyG and attnmm each time.

Started by :func:`_recipes.run_recipe` (one per test process). It imports what every recipe imports and
nothing else (no test code, no computation), then reads requests from stdin, one JSON line each:
``{"argv": [script, *args], "cwd": ..., "env": {...}, "stdout": path, "stderr": path}``. For each it forks:
the child becomes its own process group, takes the request's working directory, environment, arguments
and ``sys.path[0]`` (the script's folder), writes its output to the two files, runs the script as
``__main__`` and exits as the interpreter would (threads joined, exit handlers run). The server answers
``{"pid": ...}`` at once and ``{"returncode": ...}`` when the child has ended (negative: the signal that
ended it). A run that must start from a new interpreter (another hash seed, as two separate runs of a
user's would have) takes a plain subprocess instead (``run_recipe(..., fresh=True)``).
"""

from __future__ import annotations

import json
import os
import sys

#: What every recipe imports (and nothing of the tests): imported once, before the first fork.
PRELOADED = ("torch", "torch_geometric", "jsonargparse", "lightning.pytorch", "lightning.pytorch.cli", "attnmm",
             "attnmm.data", "attnmm.lightning")


def _child(request: dict) -> None:
    """In the forked child: become the requested process and run the script; never returns."""
    import random
    import runpy
    import warnings

    import numpy as np

    os.setpgrp()  # the test can kill the run and whatever it started (DDP's second process) at once
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    warnings.resetwarnings()
    for spec in filter(None, os.environ.get("PYTHONWARNINGS", "").split(",")):
        warnings.simplefilter(spec.split(":")[0])  # type: ignore[arg-type]
    random.seed()  # a new process's generators are seeded from the OS, not copied from a parent
    np.random.seed()
    script = request["argv"][0]
    sys.argv = list(request["argv"])
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    extra = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d and d not in sys.path]
    sys.path[1:1] = extra  # the request's PYTHONPATH, where a new interpreter would put it
    code: int | str | None = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = stop.code
    except BaseException:  # what the interpreter does with an uncaught exception (the script's own hook too)
        sys.excepthook(*sys.exc_info())
        code = 1
    raise SystemExit(code)  # the interpreter's own exit: threads joined, atexit handlers run, streams flushed


def main() -> None:
    import importlib

    for module in PRELOADED:
        importlib.import_module(module)

    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
        _, status = os.waitpid(pid, 0)
        answers.write(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
