"""``python -m studies speech_strings measure PART[,PART...] key=value ...`` (:data:`OPTIONS`): the connected-digits
recipe's model (``recipes/configs/speech_truncated_strings.yaml``: SpeechAdapter, Encoder, CTC head and attention
decoder, hybrid CTC/attention) with only its mask changed.

- ``train``: the recipe trained (``num_train`` strings x ``epochs``; default the recipe's budget; validation and test
  by the recipe's decoding) under each mask of ``masks`` with ``seed`` (stored as ``MASK (seed N)``, seed 0 under the
  mask's name), one run at a time on one thread, then :func:`evaluate`-d; ``eval`` decodes the kept checkpoints
  (``runs/speech_strings/``) again.
- ``reference``: the streaming measurement of a checkpoint trained elsewhere (``checkpoint``; ``budget`` says how).
- ``cost``: step time and memory per mask and string length, measured by :mod:`benchmarks.mask_costs`.

Each decoding keeps the errors charged to every test recording (:func:`aligned_errors`), so that the page compares
a mask's DER with Full's by resampling the recordings (the strings reuse them), each recording's errors averaged over
the seeds (:func:`studies._runner.stats.ratio_bootstrap`).
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml

from attnmm.data import FSDDStringsDataModule, collate_digit_strings
from studies._runner.train import recipe_cli
from studies.speech_strings import CONFIG, pack, unpack  # noqa: F401  (the store's detail, as the runner keeps it)

ROOT = CONFIG.parents[2]
CKPT_DIR = ROOT / "runs" / "speech_strings"
#: The masks compared, as the recipe's ``mask`` config (None: Full); the chunks keep 16 frames (640 ms) of left context.
MASKS: dict[str, dict[str, Any] | None] = {"Full": None, "Window(16, 4)": {"class_path": "attnmm.masks.Window",
                                                                           "init_args": {"left": 16, "right": 4}}}
MASKS.update({f"Chunk({s}, {c})": {"class_path": "attnmm.masks.Chunk", "init_args": {"size": s, "left_chunks": c}}
              for s, c in ((4, 4), (8, 2), (16, 1))})


@functools.cache
def _recipe() -> dict[str, Any]:
    """The strings config as the recipe's CLI parses it (every default filled in)."""
    return recipe_cli("speech_truncated", [f"--config={CONFIG}", "--trainer.logger=false", "--seed_everything=false"]
                      ).config.as_dict()


def _checkpoint(mask: str, seed: int) -> Path:
    key = mask if seed == 0 else f"{mask} (seed {seed})"
    return CKPT_DIR / ("".join(c if c.isalnum() else "_" for c in key).strip("_").lower() + ".ckpt")


def build_task(mask: str) -> Any:
    """The recipe's SequenceTask (fresh weights from the current random state) with ``mask``."""
    args = [f"--config={CONFIG}", "--trainer.logger=false", "--seed_everything=false",
            f"--model.adapter.init_args.mask={json.dumps(MASKS[mask])}"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return recipe_cli("speech_truncated", args).model


def test_strings(digits: int | None, count: int, root: str | None = None) -> Any:
    """The recipe's test strings (``digits=None``) or ``count`` test strings of exactly ``digits`` digits (no length
    cap), drawn like the recipe's from the test takes."""
    args = {k: v for k, v in _recipe()["data"]["init_args"].items() if k not in ("root", "download")}
    args["num_test"] = count
    if digits is not None:
        args.update(min_digits=digits, max_digits=digits, max_seconds=max(float(args["max_seconds"]), 2.0 * digits))
    dm = FSDDStringsDataModule(root=root, download=False, **args)
    dm.setup("test")
    return dm.test_set


def aligned_errors(ref: list[int], hyp: list[int]) -> list[int]:
    """The edits of one minimum-edit alignment of ``hyp`` to ``ref``, charged to the reference digits: a substitution
    or deletion to its digit, an insertion to the reference digit before it (the first one when it comes first).
    Their sum is the edit distance; an empty reference gets none."""
    n, m = len(ref), len(hyp)
    d = [[i + j if i == 0 or j == 0 else 0 for j in range(m + 1)] for i in range(n + 1)]
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]))
    errors, i, j = [0] * n, n, m
    while n and (i > 0 or j > 0):
        if i > 0 and j > 0 and d[i][j] == d[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            errors[i - 1] += int(ref[i - 1] != hyp[j - 1])
            i, j = i - 1, j - 1
        elif i > 0 and d[i][j] == d[i - 1][j] + 1:  # a deletion of ref[i - 1]
            errors[i - 1] += 1
            i -= 1
        else:  # an insertion after ref[i - 1]
            errors[max(i - 1, 0)] += 1
            j -= 1
    return errors


def decode_der(task: Any, strings: Any, batch_size: int = 16, decoding: str = "greedy") -> dict[str, Any]:
    """Digit error rate and exact strings of ``task`` on ``strings`` decoded by ``decoding`` (``transcribe``), and
    ``per_take``: the edits charged to each test recording (summed over the strings that reuse it) and its digits."""
    task.eval()
    exact, per_take = 0, {}
    for start in range(0, len(strings), batch_size):
        index = range(start, min(start + batch_size, len(strings)))
        items = [strings[i] for i in index]
        for i, hyp, (_, ref) in zip(index, task.transcribe(collate_digit_strings(items), decoding), items, strict=True):
            for take, e in zip(strings.plans[i].takes, aligned_errors(list(ref), hyp), strict=True):
                per_take[int(take)] = [a + b for a, b in zip(per_take.get(int(take), [0, 0]), (e, 1))]
            exact += hyp == list(ref)
    ids = sorted(per_take)
    errors, digits = [per_take[t][0] for t in ids], [per_take[t][1] for t in ids]
    return {"strings": len(strings), "digits": sum(digits), "der": sum(errors) / sum(digits),
            "string_acc": exact / len(strings), "per_take": {"ids": ids, "errors": errors, "digits": digits}}


def stream_eval(task: Any, strings: Any, count: int, piece: int = 800) -> dict[str, Any]:
    """Stream the first ``count`` strings, ``piece`` samples at a time, through a StreamingRecognizer of ``task``:
    streamed DER, agreement with the whole-utterance greedy decode, and each correctly emitted digit's latency from
    the end of its recording to the sample that emits it (:func:`~attnmm.adapters.emission_latency`)."""
    from attnmm.adapters import SpeechStream, StreamingRecognizer, emission_latency

    task.eval()
    recognizer = StreamingRecognizer(SpeechStream(task.adapter, task.encoder), task.ctc_head)
    rate = task.adapter.sample_rate
    emissions, ends, refs, edits, same, at_flush = [], [], [], 0, 0, 0
    for i in range(min(count, len(strings))):
        wave, ref = strings[i]
        emitted = [e for part in wave[None].split(piece, dim=1) for e in recognizer.push(part)[0]]
        tail = recognizer.flush()[0]
        at_flush, emitted = at_flush + len(tail), emitted + tail
        hyp = [e.label for e in emitted]
        same += hyp == task.transcribe({"waveform": wave[None], "lengths": torch.tensor([wave.numel()])}, "greedy")[0]
        edits += sum(aligned_errors(list(ref), hyp)) if len(ref) else len(hyp)
        emissions.append(emitted)
        ends.append([e / rate for e in strings.digit_ends(i)])  # seconds, as emission_latency wants
        refs.append(list(ref))
    lat = emission_latency(emissions, ends, refs, sample_rate=rate)
    ms = (1e3 * lat.latencies).tolist() or [float("nan")]
    return {"strings": len(refs), "digits": sum(map(len, refs)), "der": edits / sum(map(len, refs)),
            "equal_to_full": same, "step_frames": recognizer.stream.step, "matched": lat.num_matched,
            "emitted_at_flush": at_flush, "latency_mean_ms": 1e3 * lat.mean, "latency_p50_ms": sorted(ms)[
                (len(ms) - 1) // 2], "latency_p95_ms": 1e3 * lat.p95, "latency_max_ms": max(ms),
            "latency_min_ms": min(ms)}


def evaluate(mask: str, ckpt: Path, opts: argparse.Namespace) -> dict[str, Any]:
    """DER per string length, greedy and by the recipe's decoding (``recipe``), and for chunk masks the streaming."""
    task = build_task(mask)
    task.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"])
    decoding = _recipe()["model"]["init_args"]["decoding"]
    out: dict[str, Any] = {"der": []}
    for n in opts.lengths:
        strings = test_strings(n, max(1, opts.digits_per_length // n), opts.root)
        out["der"].append({"length": n, **decode_der(task, strings), **({"recipe": {
            "decoding": decoding, **decode_der(task, strings, decoding=decoding)}} if decoding != "greedy" else {})})
    if mask.startswith("Chunk"):
        out["stream"] = stream_eval(task, test_strings(None, opts.stream_strings, opts.root), opts.stream_strings)
    return out


def reference(opts: argparse.Namespace) -> dict[str, Any]:
    """Stream a checkpoint trained elsewhere (``checkpoint``, e.g. the recipe's own full-budget run)."""
    from attnmm.lightning import SequenceTask

    task = SequenceTask.load_from_checkpoint(opts.checkpoint, map_location="cpu", weights_only=True).eval()
    mask = repr(task.adapter.mask).replace("size=", "").replace("left_chunks=", "")
    return {"reference": {"mask": mask, "budget": opts.budget, "stream": stream_eval(
        task, test_strings(None, opts.stream_strings, opts.root), opts.stream_strings)}}


def train(opts: argparse.Namespace, mask: str) -> dict[str, Any]:
    """Fit the recipe's model and data (only the mask, ``num_train`` and ``max_epochs`` changed) with a Lightning
    Trainer in this process, keep the best checkpoint (``val_der``), test it on the recipe's test strings."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    recipe, ckpt = _recipe(), _checkpoint(mask, opts.seed)
    ckpt.parent.mkdir(parents=True, exist_ok=True)
    L.seed_everything(opts.seed, verbose=False)
    task = build_task(mask)
    data = {k: v for k, v in recipe["data"]["init_args"].items() if k not in ("root", "download")}  # the run's
    dm = FSDDStringsDataModule(root=opts.root, download=False, **{**data, "num_train": opts.num_train})
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = ModelCheckpoint(dirpath=tmp, monitor="val_der", mode="min", filename="best-{epoch}")
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=opts.epochs, logger=False, callbacks=[best],
                            enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp,
                            gradient_clip_val=recipe["trainer"]["gradient_clip_val"])
        started = time.perf_counter()
        trainer.fit(task, dm)
        seconds = time.perf_counter() - started
        (test,) = trainer.test(task, dm, ckpt_path="best", verbose=False)
        shutil.copy(best.best_model_path, ckpt)
    r = {"decoding": task.decoding, "test_der": float(test["test_der"]), "test_string_acc": float(
        test["test_string_acc"]), "best_epoch": float(Path(best.best_model_path).stem.split("epoch=")[1]),
         "seconds": seconds}
    print(f"   {mask}: {json.dumps(r)}", flush=True)
    return {"num_train": opts.num_train, "epochs": opts.epochs, **r, **evaluate(mask, ckpt, opts)}


def _models(opts: argparse.Namespace, retrain: bool) -> dict[str, Any]:
    """One model per mask of ``masks``: trained (``train``) or its kept checkpoint decoded again (``eval``)."""
    out = {}
    for mask in opts.masks:
        if mask not in MASKS:
            raise SystemExit(f"unknown mask {mask!r}; choose from {list(MASKS)}")
        key = mask if opts.seed == 0 else f"{mask} (seed {opts.seed})"
        out[f"models/{key}"] = {"seed": opts.seed, **train(opts, mask)} if retrain else {
            **opts.detail["models"][key], **evaluate(mask, _checkpoint(mask, opts.seed), opts)}
    return out


def _cost(opts: argparse.Namespace) -> dict[str, Any]:
    from benchmarks import mask_costs

    return {"cost": mask_costs.cost(opts)}


_budget = yaml.safe_load(CONFIG.read_text())
#: The parts' options; the training budget is the recipe's, and a part runs on ``threads`` threads.
OPTIONS: dict[str, Any] = {
    "masks": list(MASKS), "cost_masks": ["Full", "Window(16, 4)", "Chunk(8, 2)"], "lengths": [1, 5, 10, 20],
    "cost_lengths": [1, 2, 5, 10, 20, 40], "batch": 16, "steps": 7, "num_train": _budget["data"]["init_args"][
        "num_train"], "epochs": _budget["trainer"]["max_epochs"], "digits_per_length": 1000, "stream_strings": 200,
    "checkpoint": None, "budget": "recipe budget", "seed": 0, "root": None, "threads": 1}
MEASURE = {"cost": _cost, "reference": reference, "train": lambda o: _models(o, True),
           "eval": lambda o: _models(o, False)}
