"""Helpers for running the recipes as a user would: ``python recipes/<name>.py ...``, on the real
data under ``$ATTNMM_DATA`` when it is there, else on tiny generated files in the formats the
DataModules read (:func:`write_data`), so that every recipe runs on any machine."""

from __future__ import annotations

import atexit
import contextlib
import functools
import gzip
import importlib.util
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _graph_data import write_actor, write_peptides, write_tu

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
#: Configs by file name: recipes/configs holds each recipe's default and the variants the docs show users;
#: a study's candidates (overlays of a recipe all the same) sit in that study's configs/ folder.
CONFIG_PATHS = {p.name: p for p in sorted(RECIPES.parent.glob("studies/*/configs/*.yaml"))} | {
    p.name: p for p in sorted((RECIPES / "configs").glob("*.yaml"))}


def config_path(name: str) -> Path:
    """The config file ``name`` (``"text_lm_lstm.yaml"``), in recipes/configs or in the study that holds it."""
    return CONFIG_PATHS[name]


#: Every recipe -> (its data folder under $ATTNMM_DATA, or None for data the DataModule generates; the
#: arguments that make its smoke run small), for tests that run all of them the same way.
SMOKE = {
    "graph_graph": (None, ["--data.num_graphs=40", "--data.batch_size=8"]),
    "graph_node": ("planetoid", []),
    "speech_truncated": ("fsdd", []),
    "image_patches": ("MNIST", []),
    "text_pos": ("ud_english_ewt", []),
    "text_lm": ("tinyshakespeare", ["--data.block_size=64", "--data.eval_stride=64"]),
}


#: Overlays whose data is not their recipe's default -> (the folder of the generated files they read, the
#: arguments that make their smoke run small); always generated: the real sets take minutes to build.
CONFIG_SMOKE = {
    "graph_graph_peptides": ("lrgb", ["--data.batch_size=4"]),
    "graph_graph_peptides_mpnn": ("lrgb", ["--data.batch_size=4"]),
    "graph_node_actor": ("actor", []),
    "graph_graph_tu": ("TUDataset", ["--data.batch_size=4"]),
}


def config_smoke_args(recipe: str, config: str | None = None) -> list[str]:
    """The small-run arguments of ``config`` (an overlay's name, or ``None`` for the recipe's default), on
    generated files (:func:`generated_args`)."""
    if config in CONFIG_SMOKE:
        folder, extra = CONFIG_SMOKE[config]
        return [f"--data.root={generated_root(folder)}", *extra]
    return generated_args(recipe)


def smoke_params(exclude: tuple[str, ...] = ()) -> list[str]:
    """The recipes of :data:`SMOKE` (each runs on the real data or on generated files)."""
    return [r for r in sorted(SMOKE) if r not in exclude]


def smoke_args(recipe: str) -> list[str]:
    """The recipe's small-run arguments, with ``--data.root`` at generated files when the real data is absent."""
    folder, extra = SMOKE[recipe]
    if folder is not None and real_root(folder) is None:
        extra = [f"--data.root={generated_root(folder)}", *extra]
    return list(extra)


def generated_args(recipe: str) -> list[str]:
    """The recipe's small-run arguments on generated files even where the real data is: for the tests of
    what does not depend on the data (checkpoints, precision, DDP, another encoder, the links and configs),
    which would otherwise read and parse the real sets dozens of times (UD English-EWT alone takes seconds).
    The real data keeps its runs: :func:`smoke_args` in ``test_smoke.py`` and the ``data``-marked tests."""
    folder, extra = SMOKE[recipe]
    return [f"--data.root={generated_root(folder)}", *extra] if folder is not None else list(extra)


def real_root(name: str) -> Path | None:
    """``$ATTNMM_DATA`` when it holds the folder ``name``, else None."""
    root = os.environ.get("ATTNMM_DATA")
    return Path(root) if root and (Path(root) / name).is_dir() else None


def data_root(name: str) -> Path:
    """``$ATTNMM_DATA/name``, or skip the test when the real data is not there."""
    root = real_root(name)
    if root is None:
        pytest.skip(f"needs the real {name} data under $ATTNMM_DATA (set ATTNMM_DATA=../shared/data)")
    return root


# ------------------------------------------------------------------ generated data


def write_fsdd(root: Path, speakers: tuple[str, ...] = ("ann", "bob", "theo"), takes: int = 8) -> None:
    """FSDD's ``fsdd/recordings/<digit>_<speaker>_<take>.wav`` (8 kHz noise, 0.2 s; takes 0-4 test)."""
    import soundfile

    recordings = root / "fsdd" / "recordings"
    recordings.mkdir(parents=True)
    g = np.random.default_rng(0)
    for speaker in speakers:
        for digit in range(10):
            for index in range(takes):
                clip = (0.1 * g.standard_normal(1600)).astype(np.float32)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip, 8000, subtype="PCM_16")


#: The words of the Speech Commands folders written by :func:`write_speech_commands`: the ten commands and,
#: in ``_unknown_``, the 25 other words of the v0.02 test companion set (the pretraining config names them all)
SPEECH_COMMANDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
OTHER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "backward", "bed",
               "bird", "cat", "dog", "follow", "forward", "happy", "house", "learn", "marvin", "sheila", "tree",
               "visual", "wow")


def write_speech_commands(root: Path, speakers: int = 10, silence: int = 10) -> None:
    """``speech_commands_test_v0.02/``, the 12 class folders: every speaker says every word once (0.25 s of
    16 kHz noise; speaker ids ``s00000``...), the other words in ``_unknown_``, and ``silence`` noise clips."""
    import soundfile

    folder = root / "speech_commands_test_v0.02"
    g = np.random.default_rng(0)

    def clip() -> np.ndarray:
        return (0.1 * g.standard_normal(4000)).astype(np.float32)

    for word in (*SPEECH_COMMANDS, "_unknown_", "_silence_"):
        (folder / word).mkdir(parents=True)
    for s in range(speakers):
        for word in SPEECH_COMMANDS:
            soundfile.write(folder / word / f"s{s:05d}_nohash_0.wav", clip(), 16000, subtype="PCM_16")
        for word in OTHER_WORDS:
            soundfile.write(folder / "_unknown_" / f"{word}_s{s:05d}_nohash_0.wav", clip(), 16000, subtype="PCM_16")
    for n in range(silence):
        soundfile.write(folder / "_silence_" / f"{n}.wav", clip(), 16000, subtype="PCM_16")


def write_idx(path: Path, values: np.ndarray) -> None:
    """A gzipped uint8 IDX file (MNIST's format: images (N, 28, 28) or labels (N,))."""
    magic = 2051 if values.ndim == 3 else 2049
    header = magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in values.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + values.astype(np.uint8).tobytes())


def write_mnist(root: Path, n: int = 10000) -> None:
    """MNIST's test files only (``MNIST/raw/t10k-*``), as the offline copy: 8,000 train, 2,000 test."""
    raw = root / "MNIST" / "raw"
    raw.mkdir(parents=True)
    g = np.random.default_rng(0)
    write_idx(raw / "t10k-images-idx3-ubyte.gz", g.integers(0, 256, (n, 28, 28)))
    write_idx(raw / "t10k-labels-idx1-ubyte.gz", np.arange(n) % 10)


def write_shakespeare(root: Path, chars: int = 20000) -> None:
    """``tinyshakespeare/input.txt``: random words over Tiny Shakespeare's 65 characters, all of them in
    the first line, so the vocabulary is the real one's size (67 ids with padding and unknown)."""
    import string

    alphabet = "\n !$&',-.3:;?" + string.ascii_uppercase + string.ascii_lowercase
    g = np.random.default_rng(0)
    words = ["ROMEO:", "to", "be", "or", "not", "thou", "art", "my", "lord", "sweet", "\n"]
    text = alphabet[1:] + "\n" + " ".join(words[i] for i in g.integers(0, len(words), chars // 3))
    (root / "tinyshakespeare").mkdir(parents=True)
    (root / "tinyshakespeare" / "input.txt").write_text(text[:chars])


_UD_WORDS = (("the", "DET", "DT", "det"), ("dog", "NOUN", "NN", "nsubj"), ("runs", "VERB", "VBZ", "root"),
             ("fast", "ADV", "RB", "advmod"), ("and", "CCONJ", "CC", "cc"), ("barks", "VERB", "VBZ", "conj"))


def write_ud(root: Path, sentences: int = 64) -> None:
    """UD English-EWT's ``en_ewt-ud-{train,dev}.conllu`` (no test file: the dev file tests)."""
    g = np.random.default_rng(0)
    folder = root / "ud_english_ewt"
    folder.mkdir(parents=True)
    for split, count in (("train", sentences), ("dev", sentences // 4)):
        lines = []
        for s in range(count):
            lines.append(f"# sent_id = {split}-{s}")
            for i, k in enumerate(g.integers(0, len(_UD_WORDS), g.integers(2, 9)), start=1):
                form, upos, xpos, rel = _UD_WORDS[k]
                lines.append(f"{i}\t{form}\t{form}\t{upos}\t{xpos}\t_\t{0 if rel == 'root' else 1}\t{rel}\t_\t_")
            lines.append("")
        (folder / f"en_ewt-ud-{split}.conllu").write_text("\n".join(lines) + "\n")


def write_planetoid(root: Path, name: str = "Cora", features: int = 5, classes: int = 3, train: int = 12,
                    test: int = 20) -> None:
    """A tiny graph in Planetoid's raw format (``planetoid/<name>/raw/ind.<name>.*``: pickled arrays,
    an adjacency dict, test.index) of ``features`` features and ``classes`` classes."""
    rng = np.random.default_rng(0)
    labelled = train + 500  # PyG takes the 500 nodes after the training ones for validation
    num_nodes = labelled + test

    def onehot(n: int) -> np.ndarray:
        return np.eye(classes)[rng.integers(0, classes, n)]

    parts = {
        "x": rng.random((train, features)), "allx": rng.random((labelled, features)),
        "tx": rng.random((test, features)),
        "y": onehot(train), "ally": onehot(labelled), "ty": onehot(test),
        "graph": {i: [(i + 1) % num_nodes, (i + 7) % num_nodes] for i in range(num_nodes)},
    }
    raw = root / "planetoid" / name / "raw"
    raw.mkdir(parents=True)
    for part, value in parts.items():
        with open(raw / f"ind.{name.lower()}.{part}", "wb") as f:
            pickle.dump(value, f)
    test_index = list(range(labelled, num_nodes))[::-1]
    (raw / f"ind.{name.lower()}.test.index").write_text("".join(f"{i}\n" for i in test_index))


#: data folder -> the writer of its generated files
WRITERS: dict[str, Callable[[Path], object]] = {
    "fsdd": write_fsdd, "MNIST": write_mnist, "tinyshakespeare": write_shakespeare,
    "ud_english_ewt": write_ud, "planetoid": write_planetoid, "speech_commands_test_v0.02": write_speech_commands,
    "lrgb": write_peptides,
    "actor": write_actor,
    "TUDataset": lambda root: write_tu(root, "PROTEINS", graphs=40),
}


@functools.cache
def generated_root(folder: str) -> Path:
    """A data root holding generated files for ``folder`` (written once per test process, removed at exit)."""
    root = Path(tempfile.mkdtemp(prefix=f"attnmm-{folder}-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    WRITERS[folder](root)
    return root


def recipe_main(name: str) -> Callable[..., object]:
    """``main`` of ``recipes/<name>.py`` (``main(args, run=False)`` builds without running)."""
    spec = importlib.util.spec_from_file_location(f"{name}_recipe", RECIPES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def run_recipe(
    name: str, args: list[str], cwd: Path, timeout: int = 600, fresh: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``recipes/<name>.py`` in a process of its own from ``cwd``; fail with its output on error. Writable
    copies of the data (Planetoid's processed files) go to ``cwd/cache``, never to the user's cache.

    The process is forked from a server that has imported torch, Lightning, PyG and attnmm once
    (``_recipe_server.py``: the script runs as ``__main__`` with its own arguments, folder, environment and
    output, and exits as the interpreter would), which saves each run the interpreter's start and those
    imports; ``fresh=True`` starts a new interpreter instead (a new hash seed: for runs compared with
    each other, as two separate runs of a user's would be)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore", "ATTNMM_CACHE": str(cwd / "cache")}
    argv = [str(RECIPES / f"{name}.py"), *args]
    if fresh:
        proc = subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)
    else:
        proc = run_forked(argv, cwd, env, timeout)
    if proc.returncode != 0:
        pytest.fail(f"recipe {name} {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


@functools.cache
def _server() -> subprocess.Popen[str]:
    """The recipe server of this test process (started on first use, ended at exit)."""
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore"}
    server = subprocess.Popen([sys.executable, str(Path(__file__).with_name("_recipe_server.py"))], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
    atexit.register(server.kill)
    return server


def run_forked(argv: list[str], cwd: Path, env: dict[str, str], timeout: int) -> subprocess.CompletedProcess[str]:
    """``python *argv`` run by the recipe server, with the output captured as ``subprocess.run`` would."""
    import json
    import signal
    import threading

    server = _server()
    assert server.stdin is not None and server.stdout is not None
    out = Path(tempfile.mkdtemp(prefix="attnmm-run-"))
    try:
        request = {"argv": argv, "cwd": str(Path(cwd).resolve()), "env": env, "stdout": str(out / "stdout"),
                   "stderr": str(out / "stderr")}
        server.stdin.write(json.dumps(request) + "\n")
        server.stdin.flush()
        pid = json.loads(server.stdout.readline())["pid"]
        killed = threading.Event()

        def kill() -> None:  # the run and whatever it started (its own process group)
            killed.set()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)

        timer = threading.Timer(timeout, kill)
        timer.start()
        code = json.loads(server.stdout.readline())["returncode"]
        timer.cancel()
        stdout, stderr = (out / "stdout").read_text(), (out / "stderr").read_text()
        if killed.is_set():
            raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
        return subprocess.CompletedProcess([sys.executable, *argv], code, stdout, stderr)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def fork_python_scripts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``subprocess.run([sys.executable, "<script>.py", ...], ...)`` in the code under test a run of the
    recipe server (:func:`run_recipe`'s): the same script, arguments, folder and environment in a process of
    its own, its output where the call sends it, ``check`` raising as it would. Any other call (``git``,
    ``python -m``, a ``nice`` prefix, other options) is the real ``subprocess.run``."""
    real = subprocess.run

    def run(args: Any, *rest: Any, **kw: Any) -> subprocess.CompletedProcess[Any]:
        out, err = kw.get("stdout"), kw.get("stderr")
        script = (not rest and set(kw) <= {"cwd", "env", "check", "stdout", "stderr", "timeout"}
                  and isinstance(args, list | tuple) and len(args) > 1 and args[0] == sys.executable
                  and str(args[1]).endswith(".py"))
        files = (out is None or hasattr(out, "write")) and (err in (None, subprocess.STDOUT) or hasattr(err, "write"))
        if not (script and files):
            return real(args, *rest, **kw)
        argv = [str(a) for a in args[1:]]
        proc = run_forked(argv, Path(kw.get("cwd") or os.getcwd()).resolve(), dict(kw.get("env") or os.environ),
                       kw.get("timeout") or 24 * 3600)
        (out or sys.stdout).write(proc.stdout)
        ((out or sys.stdout) if err is subprocess.STDOUT else (err or sys.stderr)).write(proc.stderr)
        if kw.get("check") and proc.returncode:
            raise subprocess.CalledProcessError(proc.returncode, args, proc.stdout, proc.stderr)
        return subprocess.CompletedProcess(args, proc.returncode)

    monkeypatch.setattr(subprocess, "run", run)
