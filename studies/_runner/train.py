"""Training the studies share: a recipe's ``fit`` in a run directory of its own, a recipe's model and data built
from its config without training, and the epoch loop whose scores are those of the first epoch with the best
validation score (so that nothing is chosen on test)."""

from __future__ import annotations

import csv
import importlib.util
import itertools
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
_BEST = re.compile(r"best-epoch=(\d+)-(\w+)=([0-9.]+)\.ckpt$")


def read_run(run_dir: Path) -> dict[str, Any]:
    """What a finished run left in ``run_dir``: its ``metrics.json``, and the epoch and monitored value of
    the best checkpoint (the one ``fit`` tested or validated)."""
    found = sorted(run_dir.glob("**/metrics.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no metrics.json under {run_dir}: the run did not finish (see its log.txt)")
    out: dict[str, Any] = {"metrics": json.loads(found[-1].read_text())}
    for folder in (found[-1].parent, run_dir):  # then the whole run: a resumed fit's test tests the fit's best
        best = [m for p in folder.glob("**/best-*.ckpt") if (m := _BEST.search(p.name))]
        if best:
            epoch, monitor, value = best[-1].groups()
            out.update(best_epoch=int(epoch), monitor=monitor, monitored=float(value))
            break
    return out


def history(run_dir: Path, metric: str) -> dict[str, list[Any]]:
    """The epochs of the fit in ``run_dir`` as its CSV logs tell them: each epoch's validation ``metric``
    (``val_<metric>``) and training loss (``train_loss_epoch``), from every part of the fit (a resumed part's
    epochs replace those it repeats), the validation after the fit (no training loss) left out."""
    epochs: dict[int, dict[str, float]] = {}
    keys = (f"val_{metric}", "train_loss_epoch")
    logs = sorted(run_dir.glob("**/csv/version_*/metrics.csv"), key=lambda p: int(p.parent.name.split("_")[-1]))
    for log in logs:
        part: dict[int, dict[str, float]] = {}
        with log.open(newline="") as f:
            for row in csv.DictReader(f):
                for key in keys:
                    if row.get(key):
                        part.setdefault(int(row["epoch"]), {})[key] = float(row[key])
        epochs.update(part)
    done = [e for e in sorted(epochs) if len(epochs[e]) == len(keys)]
    return {"epoch": done, "val": [round(epochs[e][keys[0]], 4) for e in done],
            "train_loss": [round(epochs[e][keys[1]], 4) for e in done]}


def _epoch_clock(run_dir: Path, metric: str) -> list[float]:
    """The wall time of each epoch of the latest part of the fit in ``run_dir`` that has timed one (a resumed
    part's start is not an epoch): the gaps between its validation ``metric``'s TensorBoard events."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    gaps: list[float] = []
    for events in sorted(run_dir.glob("**/events.out.tfevents.*"), key=lambda p: p.stat().st_mtime):
        times = [e.wall_time for e in EventFileLoader(str(events)).Load()
                 if any(v.tag == f"val_{metric}" for v in e.summary.value)]
        gaps = [b - a for a, b in itertools.pairwise(times)] or gaps
    return gaps


def fit_progress(run_dir: Path, metric: str) -> dict[str, Any] | None:
    """How far the fit in ``run_dir`` has gone, from what it wrote there; ``None`` where no fit started.
    ``epochs``: its validated epochs (:func:`history`); ``max_epochs``: the epochs its config asks for (None
    where it wrote no config yet); ``best``, ``best_epoch``: its highest validation ``metric`` so far;
    ``epoch_s``: the median wall time of the last ten epochs of its latest part that timed one (None
    before); ``written``: when it last wrote a file (seconds since 1970); ``finished``: its ``metrics.json``
    is there; ``run_dir``: the folder, from the working directory where it is under it."""
    import yaml

    files = [p for p in run_dir.glob("**/*") if p.is_file()] if run_dir.is_dir() else []
    if not files:
        return None
    epochs = history(run_dir, metric)
    configs = sorted(run_dir.glob("**/config.yaml"), key=lambda p: p.stat().st_mtime)
    planned = yaml.safe_load(configs[-1].read_text()).get("trainer", {}).get("max_epochs") if configs else None
    best = max(range(len(epochs["val"])), key=lambda i: (epochs["val"][i], -i), default=None)
    gaps = _epoch_clock(run_dir, metric)[-10:]
    return {"epochs": len(epochs["epoch"]), "max_epochs": planned,
            "best": None if best is None else epochs["val"][best],
            "best_epoch": None if best is None else epochs["epoch"][best],
            "epoch_s": sorted(gaps)[len(gaps) // 2] if gaps else None,
            "written": max(p.stat().st_mtime for p in files),
            "finished": any(run_dir.glob("**/metrics.json")),
            "run_dir": str(run_dir.relative_to(Path.cwd()) if run_dir.is_relative_to(Path.cwd()) else run_dir)}


def fit_recipe(cmd: list[str], run_dir: Path, threads: int = 1) -> dict[str, Any]:
    """Run the recipe command ``cmd`` (paths relative to the repository) in ``run_dir``, one process, ``threads``
    threads; its command line, :func:`read_run` and its wall time."""
    run_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    started = time.perf_counter()
    with (run_dir / "log.txt").open("w") as log:  # the recipe's runs/<config>/ lands in run_dir
        argv = [sys.executable, *(str(ROOT / c) if c.endswith((".py", ".yaml")) else c for c in cmd)]
        status = subprocess.run(argv, cwd=run_dir, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    if status:
        tail = (run_dir / "log.txt").read_text()[-3000:]
        raise RuntimeError(f"the run failed (exit {status}): python {' '.join(cmd)}\n{tail}")
    wall = round(time.perf_counter() - started, 1)
    return {"command": "python " + " ".join(cmd), **read_run(run_dir), "wall_s": wall}


def recipe_cli(recipe: str, args: list[str]) -> Any:
    """The ``RecipeCLI`` of ``recipes/<recipe>.py`` built from ``args`` without running (``cli.model``,
    ``cli.datamodule``); the program's own arguments are not read."""
    spec = importlib.util.spec_from_file_location(f"_{recipe}_recipe", ROOT / "recipes" / f"{recipe}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    program, sys.argv[1:] = sys.argv[1:], []
    try:
        return module.main(list(args), run=False)
    finally:
        sys.argv[1:] = program


def parameters(recipe: str, configs: list[str]) -> dict[str, int]:
    """The parameter count of the model ``recipes/<recipe>.py`` builds from ``configs`` (paths from the
    repository; untrained): in all and by part (adapter, encoder, head)."""
    args = [a for c in configs for a in ("--config", str(ROOT / c))] + ["--trainer.logger", "false"]
    model = recipe_cli(recipe, args).model
    parts = {part: sum(p.numel() for p in getattr(model, part).parameters())
             for part in ("adapter", "encoder", "head") if getattr(model, part, None) is not None}
    return {"total": sum(p.numel() for p in model.parameters()), **parts}


def epoch_seconds(recipe: str, configs: list[str], epochs: int = 2, threads: int = 1) -> dict[str, Any]:
    """The wall time of each epoch (training and its validation) of ``epochs`` epochs of the ``fit`` that
    ``recipes/<recipe>.py`` runs from ``configs``, in this process on ``threads`` threads, in a folder thrown
    away after; with the epochs the configs ask for (``max_epochs``)."""
    import tempfile

    from lightning.pytorch.callbacks import Callback

    class Clock(Callback):
        def on_train_epoch_start(self, *args: Any) -> None:
            self.start = time.perf_counter()

        def on_train_epoch_end(self, *args: Any) -> None:  # after the epoch's validation
            seconds.append(round(time.perf_counter() - self.start, 2))

    seconds: list[float] = []
    here = Path.cwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            args = [a for c in configs for a in ("--config", str(ROOT / c))]
            cli = recipe_cli(recipe, [*args, "--torch_threads", str(threads), "--trainer.logger", "false",
                                      "--trainer.enable_progress_bar", "false"])
            planned, cli.trainer.fit_loop.max_epochs = cli.trainer.max_epochs, epochs
            cli.trainer.callbacks.append(Clock())
            cli.trainer.fit(cli.model, cli.datamodule)
        finally:
            os.chdir(here)
    return {"seconds": seconds, "max_epochs": planned, "threads": threads}


def workdir(budget: dict[str, Any]) -> Path:
    """The folder of a study's run directories: its budget's ``workdir``, else ``runs/studies``."""
    return Path(budget.get("workdir", ROOT / "runs" / "studies"))


def sgd_epoch(modules: torch.nn.Module, batches: Iterable[Any], loss: Callable[[Any], torch.Tensor],
              optimizer: torch.optim.Optimizer, schedule: Any = None) -> None:
    """One training epoch of ``modules`` over ``batches``; evaluation mode after it."""
    modules.train()
    for batch in batches:
        value = loss(batch)
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        if schedule is not None:
            schedule.step()
    modules.eval()


def best_epoch(epoch: Callable[[], None], score: Callable[[], dict[str, float]], epochs: int) -> dict[str, Any]:
    """``epochs`` times ``epoch()`` (a training epoch) then ``score()`` (no gradients: ``{"val": v, "test": t, ...}``);
    the scores of the first epoch with the best ``val``, its number, and the seconds spent training and in all."""
    history, train_s, started = [], 0.0, time.perf_counter()
    for _ in range(epochs):
        t = time.perf_counter()
        epoch()
        train_s += time.perf_counter() - t
        with torch.no_grad():
            history.append(score())
    best = max(range(epochs), key=lambda e: (history[e]["val"], -e))
    return {**history[best], "best_epoch": best + 1, "train_s": train_s, "wall_s": time.perf_counter() - started,
            "epochs": epochs}


def _kept(run_dir: Path, done: dict[str, Any], metric: str) -> Path:
    """The checkpoint a finished selection fit in ``run_dir`` kept and validated: the only ``best-*`` one, whose
    name carries the validation score the fit wrote (``done``, :func:`read_run`)."""
    from .protocol import ProtocolError

    kept = sorted(p for p in run_dir.glob("**/best-*.ckpt") if _BEST.search(p.name))
    if len(kept) != 1:
        raise ProtocolError(f"the fit in {run_dir} should have kept one best-* checkpoint, found {len(kept)}: "
                           f"{[str(p.relative_to(run_dir)) for p in kept]}")
    match = _BEST.search(kept[0].name)
    assert match is not None
    score = done["metrics"][f"val_{metric}"]
    if match.group(2) != f"val_{metric}" or abs(float(match.group(3)) - score) > 5e-5:
        raise ProtocolError(f"{kept[0]} is not the checkpoint the fit in {run_dir} validated "
                           f"(val_{metric} {score:.4f} in its metrics.json)")
    return kept[0]


def fit_scores(cmd: list[str], run_dir: Path, evaluate: Any, metric: str, threads: int = 1,
               resume: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """A study's run of a recipe's ``fit`` (:func:`fit_recipe`): a selection run (``evaluate.kind``) with
    ``--test_after_fit false`` scores every set of ``evaluate`` by the validation ``metric``, a test run by the
    test one; the scores and what the run left.

    With ``resume`` a candidate and seed cost one fit in ``run_dir``: a run whose fit finished there before
    its record was stored is read back, a stopped fit goes on from its last checkpoint (``--ckpt_path last``),
    and the test run of a finished selection fit tests the checkpoint that fit kept and validated (the
    recipe's ``test --ckpt_path``; it must be the only ``best-*`` checkpoint there and carry the validation
    score the fit wrote); a test run without a finished selection fit is refused. The content of its
    ``--config`` files is kept at the fit's start (``configs.json``, and the detail's ``configs``); a fit
    whose configs changed since is refused. Earlier logs are kept beside the new one (``log.N.txt``). A
    selection run's detail keeps the fit's epochs (:func:`history`)."""
    from .protocol import ProtocolError, content_hash

    stage = "val" if evaluate.kind == "select" else "test"
    out: dict[str, Any] | None = None
    configs = {c: content_hash(ROOT / c) for c, flag in zip(cmd[1:], cmd) if flag == "--config"} if resume else {}
    if resume and (run_dir / "configs.json").exists():
        if json.loads((run_dir / "configs.json").read_text()) != configs:
            raise ProtocolError(f"the configs of the fit in {run_dir} changed since it started (configs.json): "
                                "resuming it would mix two configs; move that run directory away to start again")
        done = read_run(run_dir) if any(run_dir.glob("**/metrics.json")) else {"metrics": {}}
        out = {**done, "command": "python " + " ".join(cmd)} if f"{stage}_{metric}" in done["metrics"] else None
        if out is None and stage == "test" and f"val_{metric}" not in done["metrics"]:
            raise ProtocolError(f"the selection fit in {run_dir} has not finished: its test run tests the "
                                "checkpoint that fit keeps (run select first)")
        if out is None and (run_dir / "log.txt").exists():  # the earlier part's log kept beside
            (run_dir / "log.txt").rename(run_dir / f"log.{len(list(run_dir.glob('log.*.txt')))}.txt")
        if out is None and stage == "test":
            cmd = [cmd[0], "test", *cmd[2:], "--ckpt_path", str(_kept(run_dir, done, metric).relative_to(run_dir))]
        else:
            cmd = [*cmd, *(["--ckpt_path", "last"] if any(run_dir.glob("**/last*.ckpt")) else [])]
    elif resume and stage == "test":
        raise ProtocolError(f"no selection fit in {run_dir}: its test run tests the checkpoint that fit keeps "
                            "(run select first)")
    elif resume:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "configs.json").write_text(json.dumps(configs, indent=1) + "\n")
    if out is None:
        out = fit_recipe([*cmd, *(["--test_after_fit", "false"] if stage == "val" else [])], run_dir, threads)
    if resume:
        out["configs"] = configs
        if stage == "val":  # every part of the fit is in run_dir (no test run before its selection run)
            out["history"] = history(run_dir, metric)
    return {name: {metric: out["metrics"][f"{stage}_{metric}"]} for name in evaluate}, out
