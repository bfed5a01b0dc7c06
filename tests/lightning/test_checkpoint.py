"""Atomic checkpoints, the saved random state, and crash-and-resume of a recipe run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from _recipes import run_forked

from attnmm.lightning import AtomicCheckpointIO, RandomState, find_last_checkpoint

# the smallest graph_graph run: 64 training graphs in batches of 8 -> 8 steps per epoch, 3 epochs
TINY = [
    "--data.num_graphs=80", "--data.num_nodes=8", "--data.batch_size=8", "--trainer.max_epochs=3",
    "--model.adapter.init_args.d_model=16", "--model.encoder.init_args.d_model=16",
    "--model.encoder.init_args.num_layers=1", "--model.encoder.init_args.heads=2",
    "--model.head.init_args.d_model=16", "--torch_threads=1", "--trainer.enable_model_summary=false",
]

# callbacks of the crash test: the recipe's best checkpoint (without its ``last.ckpt``), ``last.ckpt``
# every 3 steps, the random state (always there), and a callback that records the step training starts
# at and can SIGKILL its own process at a given step (a kill at a known point of an epoch, not a timing guess)
CALLBACKS = """\
checkpoint: {{save_last: false}}
trainer:
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {{save_top_k: 0, save_last: true, every_n_train_steps: 3}}
    - class_path: killer.KillAt
      init_args: {{step: {step}, record: {record}}}
"""

KILLER = '''
import os
import signal

import lightning as L


class KillAt(L.Callback):
    def __init__(self, step: int, record: str) -> None:
        self.step, self.record = step, record

    def on_train_start(self, trainer, pl_module) -> None:
        with open(self.record, "a") as f:
            f.write(f"{trainer.global_step}\\n")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)
'''


def _run(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(filter(None, [str(cwd), os.environ.get("PYTHONPATH")]))  # the killer, then the package
    env = {**os.environ, "MPLBACKEND": "Agg", "PYTHONWARNINGS": "ignore", "PYTHONPATH": path}
    script = Path(__file__).resolve().parents[2] / "recipes" / "graph_graph.py"
    proc = run_forked([str(script), *args], cwd, env, timeout=300)  # a process of its own (see _recipes.run_recipe)
    if check and proc.returncode != 0:
        pytest.fail(f"graph_graph {' '.join(args)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def _metrics(run: Path) -> dict[str, float]:
    (path,) = run.glob("runs/callbacks/version_*/metrics.json")
    return json.loads(path.read_text())


def _setup(run: Path, kill_at: int) -> list[str]:
    run.mkdir()
    (run / "killer.py").write_text(KILLER)
    (run / "callbacks.yaml").write_text(CALLBACKS.format(step=kill_at, record=run / "starts.txt"))
    return ["fit", *TINY, "--config", str(run / "callbacks.yaml")]


@pytest.mark.slow  # kills and resumes recipe runs
def test_sigkill_mid_epoch_then_resume_matches_uninterrupted_run(tmp_path: Path) -> None:
    whole = tmp_path / "whole"
    _run(_setup(whole, kill_at=-1), whole)

    crashed = tmp_path / "crashed"
    args = _setup(crashed, kill_at=13)  # epoch 1 holds steps 8..15; last.ckpt was written at step 12
    proc = _run(args, crashed, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert not list(crashed.glob("runs/**/metrics.json"))
    last = find_last_checkpoint(crashed / "runs")
    assert last is not None and torch.load(last, weights_only=True)["global_step"] == 12

    (crashed / "callbacks.yaml").write_text(CALLBACKS.format(step=-1, record=crashed / "starts.txt"))
    proc = _run([*args, "--ckpt_path", "last"], crashed)
    assert f"resuming from {last.relative_to(crashed)}" in proc.stdout
    assert (crashed / "starts.txt").read_text().split() == ["0", "12"]
    assert _metrics(crashed) == _metrics(whole)
    # the weights at the end: the training after the resume was the uninterrupted run's, batch for batch
    # (whichever checkpoint the test metrics came from)
    ends = [torch.load(find_last_checkpoint(run / "runs"), weights_only=True) for run in (whole, crashed)]
    assert ends[0]["global_step"] == ends[1]["global_step"] == 24
    assert all(torch.equal(v, ends[1]["state_dict"][k]) for k, v in ends[0]["state_dict"].items())


@pytest.mark.slow  # kills and resumes a recipe run
def test_last_checkpoint_is_the_newest_epoch_not_the_best(tmp_path: Path) -> None:
    # The recipes' own checkpoint (save_last: true), best at epoch 0 (``epoch``, smallest first): Lightning
    # alone writes last.ckpt only beside a new best, and the resume would start over from epoch 0's end.
    run = tmp_path / "run"
    run.mkdir()
    (run / "killer.py").write_text(KILLER)
    callbacks = "trainer:\n  callbacks:\n    - class_path: killer.KillAt\n"
    callbacks += "      init_args: {{step: {step}, record: {record}}}\n"
    (run / "callbacks.yaml").write_text(callbacks.format(step=16, record=run / "starts.txt"))
    args = ["fit", *TINY, "--checkpoint.monitor=epoch", "--checkpoint.mode=min"]
    args += ["--config", str(run / "callbacks.yaml")]
    proc = _run(args, run, check=False)  # killed as epoch 2 (steps 16..23) starts
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    (best,) = run.glob("runs/**/best-*.ckpt")
    last = find_last_checkpoint(run / "runs")
    assert last is not None and last.parent == best.parent and last.name == "last.ckpt"
    assert torch.load(best, weights_only=True)["global_step"] == 8
    assert torch.load(last, weights_only=True)["global_step"] == 16

    (run / "callbacks.yaml").write_text(callbacks.format(step=-1, record=run / "starts.txt"))
    _run([*args, "--ckpt_path", "last"], run)
    assert (run / "starts.txt").read_text().split() == ["0", "16"]
    assert torch.load(last, weights_only=True)["global_step"] == 24
    assert sorted(p.name for p in last.parent.iterdir()) == sorted([best.name, "last.ckpt"])
    # a finished fit resumed trains no further
    _run([*args, "--ckpt_path", "last"], run)
    assert (run / "starts.txt").read_text().split() == ["0", "16"]
    assert torch.load(last, weights_only=True)["global_step"] == 24


def test_atomic_save_keeps_old_checkpoint_when_write_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"step": torch.tensor(1)}, path)

    def broken_save(obj: object, f: object) -> None:
        f.write(b"partial")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"step": torch.tensor(2)}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True) == {"step": torch.tensor(1)}
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


WRITER = """
import sys, time, torch
from attnmm.lightning import AtomicCheckpointIO
save = torch.save
def slow_save(obj, f):  # a slow disk: most of each cycle is spent inside a write
    save(obj, f)
    f.flush()
    time.sleep(0.2)
torch.save = slow_save
io, step = AtomicCheckpointIO(), 0
while True:
    step += 1
    io.save_checkpoint({"step": step, "weights": torch.full((4_000_000,), float(step))}, sys.argv[1])
"""


@pytest.mark.slow  # kills and resumes recipe runs
def test_sigkill_during_writes_never_leaves_a_truncated_last(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    cut_off = 0  # kills that landed during a write (they leave the temporary file)
    delays = [0.05, 0.13, 0.29, 0.41, 0.07, 0.19, 0.33, 0.11]
    for attempt, delay in enumerate(delays):
        if attempt >= 4 and cut_off:  # four kills at least, and one of them midway through a write
            break
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
        try:
            deadline = time.monotonic() + 60
            while not path.exists() and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(delay)
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
        ckpt = torch.load(path, weights_only=True)
        assert ckpt["weights"].shape == (4_000_000,) and bool((ckpt["weights"] == ckpt["step"]).all())
        left = len(list(tmp_path.glob(".last.ckpt.*.tmp")))
        assert left <= 1  # at most the one cut off by the kill
        cut_off += left
    assert cut_off > 0  # the test did kill writes midway
    AtomicCheckpointIO().save_checkpoint({"step": 0}, path)
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_random_state_round_trip() -> None:
    callback = RandomState()
    state = callback.state_dict()
    before = torch.rand(3), torch.randn(2)
    callback.load_state_dict(state)
    torch.testing.assert_close((torch.rand(3), torch.randn(2)), before, rtol=0, atol=0)


def test_find_last_checkpoint_takes_the_newest(tmp_path: Path) -> None:
    assert find_last_checkpoint(tmp_path) is None
    old = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    new = tmp_path / "version_1" / "checkpoints" / "last-v1.ckpt"
    for i, p in enumerate((old, new)):
        p.parent.mkdir(parents=True)
        p.write_bytes(b"x")
        os.utime(p, ns=(10**18 + i, 10**18 + i))
    (tmp_path / "version_1" / "checkpoints" / "best.ckpt").write_bytes(b"x")
    assert find_last_checkpoint(tmp_path / "missing", tmp_path) == new
