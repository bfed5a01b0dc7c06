"""Connected digits under Full, Window and Chunk masks, measured: ``python -m studies speech_strings measure``.

The model is the connected-digits recipe's (``recipes/configs/speech_truncated_strings.yaml``:
SpeechAdapter + 4-layer Encoder + CTC head + attention decoder, hybrid CTC/attention), with only its
mask changed. Parts (``python -m studies speech_strings measure PART[,PART...] key=value ...``, :data:`OPTIONS`):

- ``cost``: one training step (forward, hybrid loss, backward, AdamW) on a batch of ``batch`` real
  test strings of exactly n digits, for every mask and n in ``cost_lengths``, each (mask, n) in a fresh
  process (one thread): the fastest of ``steps`` timed steps after a warm-up, scaled to an epoch of
  the recipe's ``num_train`` strings, and the step's peak memory above its inputs
  (:func:`benchmarks._measure.peak_of`).
- ``train``: the recipe trained (``num_train`` strings, ``epochs`` epochs; default the recipe's
  budget; validation and test by the recipe's decoding) under each mask of ``masks``, one run at a
  time (one thread). Each model is then decoded, greedily and by the recipe's decoding, on test
  strings of exactly n digits for n in ``lengths`` (``digits_per_length`` digits per n), and, for
  a Chunk mask, its first ``stream_strings``
  recipe test strings are streamed through :class:`~attnmm.adapters.StreamingRecognizer`: the
  streamed digits (checked against the whole-utterance greedy decode) and each correctly emitted
  digit's latency, from the end of its recording in the string to the sample at which the stream
  emits it (:func:`~attnmm.adapters.emission_latency`; compute time excluded).
- ``reference``: the streaming measurement of a checkpoint trained elsewhere (``checkpoint``, e.g.
  the recipe's own run at its full budget; ``budget`` says how it was trained).

Training seeds: ``seed=N`` trains (or evaluates) the models of seed N, stored as ``MASK (seed N)`` (seed
0 under the mask's name); the page reports each mask's DER as the mean over its seeds. Each decoding
keeps the errors charged to every test recording (:func:`aligned_errors`), so that whether a mask's DER
differs from Full's is decided by resampling the recordings (the strings reuse them), each recording's
errors averaged over the seeds (:func:`studies._runner.stats.ratio_bootstrap`).

Results go to the ``speech_strings`` study's store (its ``detail``: each part and each trained model with
the command, machine and time of its run); ``python -m studies speech_strings render`` writes the
study's block of ``docs/recipes/speech.md`` from them. The checkpoints
are kept in ``runs/speech_strings/`` (the ``eval`` part decodes them again without training).
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "recipes" / "configs" / "speech_truncated_strings.yaml"
STORE = Path(__file__).with_name("store.json")
CKPT_DIR = ROOT / "runs" / "speech_strings"

#: The masks compared, as the recipe's ``mask`` config (``None``: Full, only the batch's Padding).
#: The three chunk sizes keep the same left context, 16 frames (640 ms).
MASKS: dict[str, dict[str, Any] | None] = {
    "Full": None,
    "Window(16, 4)": {"class_path": "attnmm.masks.Window", "init_args": {"left": 16, "right": 4}},
    "Chunk(4, 4)": {"class_path": "attnmm.masks.Chunk", "init_args": {"size": 4, "left_chunks": 4}},
    "Chunk(8, 2)": {"class_path": "attnmm.masks.Chunk", "init_args": {"size": 8, "left_chunks": 2}},
    "Chunk(16, 1)": {"class_path": "attnmm.masks.Chunk", "init_args": {"size": 16, "left_chunks": 1}},
}
#: The masks of the cost part (one of each kind, at the same left context).
COST_MASKS = ("Full", "Window(16, 4)", "Chunk(8, 2)")
#: Milliseconds between encoder frames: 4 mel hops of 10 ms (SpeechAdapter's subsampling).
FRAME_MS = 40


@functools.cache
def _recipe() -> dict[str, Any]:
    """The strings config as the recipe resolves it (``--print_config``: an overlay of the speech default,
    every linked width and class count filled in)."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location("speech_truncated_recipe", ROOT / "recipes" / "speech_truncated.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        recipe.main(["fit", f"--config={CONFIG}", "--print_config"])
    return yaml.safe_load(out.getvalue())


def _slug(mask: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in mask).strip("_").lower()


def model_key(mask: str, seed: int) -> str:
    """The store's key of the model of ``mask`` trained with ``seed``: the mask alone for seed 0."""
    return mask if seed == 0 else f"{mask} (seed {seed})"


def mask_of(key: str) -> str:
    """The mask of a model key (:func:`model_key`)."""
    return key.split(" (seed ")[0]


def _checkpoint(mask: str, seed: int) -> Path:
    return CKPT_DIR / f"{_slug(model_key(mask, seed))}.ckpt"


def build_task(mask: str, decoding: str | None = None) -> Any:
    """The recipe's SequenceTask (fresh weights) with ``mask`` (and ``decoding``, when given)."""
    import jsonargparse

    from attnmm.data import FSDDStringsDataModule
    from attnmm.lightning import SequenceTask

    model = copy.deepcopy(_recipe()["model"])
    for head in ("ctc_head", "decoder"):  # the recipe links the heads' class count to the data's
        model["init_args"][head]["init_args"]["num_classes"] = FSDDStringsDataModule.num_classes
    width = model["init_args"]["adapter"]["init_args"]["d_model"]
    for part in ("encoder", "ctc_head", "decoder"):  # and the encoder's and heads' width to the adapter's
        model["init_args"][part]["init_args"].setdefault("d_model", width)
    model["init_args"]["adapter"]["init_args"]["mask"] = MASKS[mask]
    if decoding is not None:
        model["init_args"]["decoding"] = decoding
    parser = jsonargparse.ArgumentParser()
    parser.add_argument("--model", type=SequenceTask)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parser.instantiate_classes(parser.parse_object({"model": model})).model


def test_strings(digits: int | None, count: int, root: str | None = None) -> Any:
    """The recipe's test strings (``digits=None``) or ``count`` test strings of exactly ``digits``
    digits (no length cap), drawn like the recipe's from the test takes; a DigitStrings dataset."""
    from attnmm.data import FSDDStringsDataModule

    skip = ("batch_size", "num_workers", "root", "download")
    args = {k: v for k, v in _recipe()["data"]["init_args"].items() if k not in skip}
    args["num_test"] = count
    if digits is not None:
        args.update(min_digits=digits, max_digits=digits, max_seconds=max(float(args["max_seconds"]), 2.0 * digits))
    dm = FSDDStringsDataModule(root=root, download=False, **args)
    dm.setup("test")
    return dm.test_set


def _edits(ref: list[int], hyp: list[int]) -> int:
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
        prev = cur
    return prev[-1]


def aligned_errors(ref: list[int], hyp: list[int]) -> list[int]:
    """The edits of one minimum-edit alignment of ``hyp`` to ``ref``, charged to the reference digits: a
    substitution or deletion to its digit, an insertion to the reference digit before it (the first one
    when it comes first). Their sum is the edit distance; an empty reference gets none."""
    n, m = len(ref), len(hyp)
    if n == 0:
        return []
    d = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n + 1):
        d[i][0] = i
    for j in range(m + 1):
        d[0][j] = j
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            d[i][j] = min(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]))
    errors, i, j = [0] * n, n, m
    while i > 0 or j > 0:
        if i > 0 and j > 0 and d[i][j] == d[i - 1][j - 1] + (ref[i - 1] != hyp[j - 1]):
            errors[i - 1] += int(ref[i - 1] != hyp[j - 1])
            i, j = i - 1, j - 1
        elif i > 0 and d[i][j] == d[i - 1][j] + 1:  # a deletion of ref[i - 1]
            errors[i - 1] += 1
            i -= 1
        else:  # an insertion before ref[i] (after ref[i - 1])
            errors[max(i - 1, 0)] += 1
            j -= 1
    return errors


def decode_der(task: Any, strings: Any, batch_size: int = 16, decoding: str = "greedy") -> dict[str, Any]:
    """Digit error rate (edits / reference digits) and exact strings of ``task`` on ``strings``, decoded by
    ``decoding`` (``SequenceTask.transcribe``; default greedy CTC), and ``per_take``: the edits charged to
    each test recording (:func:`aligned_errors`, summed over the strings that reuse it) and its digits, so
    that a comparison can resample recordings (:func:`studies._runner.stats.ratio_bootstrap`)."""
    from attnmm.data import collate_digit_strings

    task.eval()
    edits = digits = exact = 0
    per_take: dict[int, list[int]] = {}
    for start in range(0, len(strings), batch_size):
        index = range(start, min(start + batch_size, len(strings)))
        items = [strings[i] for i in index]
        batch = collate_digit_strings(items)
        for i, hyp, (_, ref) in zip(index, task.transcribe(batch, decoding), items, strict=True):
            errors = aligned_errors(list(ref), hyp)
            for take, e in zip(strings.plans[i].takes, errors, strict=True):
                seen = per_take.setdefault(int(take), [0, 0])
                seen[0], seen[1] = seen[0] + e, seen[1] + 1
            edits, digits, exact = edits + sum(errors), digits + len(ref), exact + (hyp == list(ref))
    ids = sorted(per_take)
    return {"strings": len(strings), "digits": digits, "der": edits / digits, "string_acc": exact / len(strings),
            "per_take": {"ids": ids, "errors": [per_take[t][0] for t in ids], "digits": [per_take[t][1] for t in ids]}}


def stream_eval(task: Any, strings: Any, count: int, piece: int = 800) -> dict[str, Any]:
    """Stream the first ``count`` strings, ``piece`` samples at a time, through a StreamingRecognizer
    of ``task``: streamed DER, agreement with the whole-utterance greedy decode, emission latency."""
    from attnmm.adapters import SpeechStream, StreamingRecognizer, emission_latency

    task.eval()
    recognizer = StreamingRecognizer(SpeechStream(task.adapter, task.encoder), task.ctc_head)
    sample_rate = task.adapter.sample_rate
    emissions, ends, refs = [], [], []
    edits = digits = same = at_flush = 0
    for i in range(min(count, len(strings))):
        wave, ref = strings[i]
        emitted = [e for part in wave[None].split(piece, dim=1) for e in recognizer.push(part)[0]]
        tail = recognizer.flush()[0]
        at_flush += len(tail)
        emitted += tail
        hyp = [e.label for e in emitted]
        full = task.transcribe({"waveform": wave[None], "lengths": torch.tensor([wave.numel()])}, "greedy")[0]
        same += hyp == full
        edits, digits = edits + _edits(list(ref), hyp), digits + len(ref)
        emissions.append(emitted)
        ends.append([e / sample_rate for e in strings.digit_ends(i)])  # seconds, as emission_latency wants
        refs.append(list(ref))
    lat = emission_latency(emissions, ends, refs, sample_rate=sample_rate)
    ms = 1e3 * lat.latencies
    return {
        "strings": len(refs), "digits": digits, "der": edits / digits, "equal_to_full": same,
        "step_frames": recognizer.stream.step, "matched": lat.num_matched, "emitted_at_flush": at_flush,
        "latency_mean_ms": 1e3 * lat.mean, "latency_p50_ms": float(ms.median()) if ms.numel() else math.nan,
        "latency_p95_ms": 1e3 * lat.p95, "latency_max_ms": float(ms.max()) if ms.numel() else math.nan,
        "latency_min_ms": float(ms.min()) if ms.numel() else math.nan,
    }


# ---------------------------------------------------------------------------------------------------
# the parts


def _cost_worker(mask: str, batch_file: str, steps: int) -> None:
    """In a fresh process: time ``steps`` training steps of the recipe's model on the saved batch and
    measure one step's peak memory; print JSON."""
    from benchmarks._measure import peak_of

    torch.set_num_threads(1)
    torch.manual_seed(0)
    task = build_task(mask).train()
    batch = torch.load(batch_file, weights_only=True)
    opt = torch.optim.AdamW(task.parameters(), lr=1e-4)
    frames = int(task.adapter(batch).x.size(1))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # self.log outside a Trainer
            loss = task._shared_step(batch, "train")
        loss.backward()
        opt.step()

    step()  # warm-up; AdamW's state now exists
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    print(json.dumps({"frames": frames, "step_s": min(times), "step_median_s": sorted(times)[len(times) // 2],
                      "peak_bytes": peak_of(step)}))


def cost(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.data import collate_digit_strings

    steps_per_epoch = math.ceil(_recipe()["data"]["init_args"]["num_train"] / opts.batch)
    rows = []
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        for n in opts.cost_lengths:
            strings = test_strings(n, opts.batch, opts.root)
            batch = collate_digit_strings([strings[i] for i in range(len(strings))])
            path = Path(tmp) / f"batch_{n}.pt"
            torch.save(dict(batch), path)
            seconds = float(batch["lengths"].float().mean()) / 8000
            order = opts.cost_masks if n % 2 == 0 else opts.cost_masks[::-1]
            for mask in order:
                cmd = [sys.executable, "-m", "studies.speech_strings.measure", "--cost-worker", mask, str(path),
                       str(opts.steps)]
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
                if proc.returncode or not lines:
                    raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
                r = json.loads(lines[-1])
                row = {"mask": mask, "digits": n, "batch": opts.batch, "mean_seconds": seconds, **r,
                       "epoch_min": r["step_s"] * steps_per_epoch / 60, "peak_mb": r["peak_bytes"] / 2**20}
                rows.append(row)
                print(f"   {n:3d} digits ({row['frames']} frames) {mask:14s} step {r['step_s']:.3f} s, "
                      f"peak {row['peak_mb']:.0f} MB", flush=True)
    return {"rows": rows, "steps_per_epoch": steps_per_epoch, "steps": opts.steps, "load_avg": os.getloadavg()[1]}


def evaluate(mask: str, ckpt: Path, opts: argparse.Namespace) -> dict[str, Any]:
    """DER per string length, greedy and by the recipe's decoding (``recipe``), and for chunk masks the
    streaming measurement."""
    task = load_trained(mask, ckpt)
    decoding = _recipe()["model"]["init_args"]["decoding"]
    out: dict[str, Any] = {"der": []}
    for n in opts.lengths:
        strings = test_strings(n, max(1, opts.digits_per_length // n), opts.root)
        row = {"length": n, **decode_der(task, strings)}
        if decoding != "greedy":
            row["recipe"] = {"decoding": decoding, **decode_der(task, strings, decoding=decoding)}
        out["der"].append(row)
        said = f", {decoding} {100 * row['recipe']['der']:.2f}%" if "recipe" in row else ""
        print(f"   {mask}: {n} digits: greedy DER {100 * row['der']:.2f}%{said}", flush=True)
    if MASKS[mask] is not None and MASKS[mask]["class_path"].endswith("Chunk"):  # type: ignore[index]
        out["stream"] = stream_eval(task, test_strings(None, opts.stream_strings, opts.root), opts.stream_strings)
        print(f"   {mask}: streamed {json.dumps({k: round(v, 4) for k, v in out['stream'].items()})}", flush=True)
    return out


def reference(opts: argparse.Namespace) -> dict[str, Any]:
    """Stream a checkpoint trained elsewhere (``checkpoint``, e.g. the recipe's own full-budget run)."""
    from attnmm.lightning import SequenceTask

    task = SequenceTask.load_from_checkpoint(opts.checkpoint, map_location="cpu", weights_only=True).eval()
    mask = repr(task.adapter.mask).replace("size=", "").replace("left_chunks=", "")
    stream = stream_eval(task, test_strings(None, opts.stream_strings, opts.root), opts.stream_strings)
    print(f"   reference {mask}: streamed {json.dumps({k: round(v, 4) for k, v in stream.items()})}", flush=True)
    return {"mask": mask, "budget": opts.budget, "stream": stream}


def load_trained(mask: str, ckpt: Path) -> Any:
    """The recipe's model with ``mask`` and the weights of ``ckpt``, in eval mode."""
    task = build_task(mask)
    task.load_state_dict(torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"])
    return task.eval()


def train(opts: argparse.Namespace, mask: str) -> dict[str, Any]:
    """Fit the recipe's model and data (its config, its decoding for validation and test; only the mask,
    ``num_train`` and ``max_epochs`` changed) with a Lightning Trainer in this process, keep the best
    checkpoint (``val_der``) and test it on the recipe's test strings."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint

    from attnmm.data import FSDDStringsDataModule

    recipe = _recipe()
    CKPT_DIR.mkdir(parents=True, exist_ok=True)
    ckpt = _checkpoint(mask, opts.seed)
    print(f"== train {mask}, seed {opts.seed}: {opts.num_train} strings x {opts.epochs} epochs", flush=True)
    L.seed_everything(opts.seed, verbose=False)
    task = build_task(mask)
    # the config's data options, but where the data is and whether to fetch it are this run's
    data_args = {k: v for k, v in recipe["data"]["init_args"].items() if k not in ("root", "download")}
    dm = FSDDStringsDataModule(root=opts.root, download=False, **{**data_args, "num_train": opts.num_train})
    with tempfile.TemporaryDirectory() as tmp:
        best = ModelCheckpoint(dirpath=tmp, monitor="val_der", mode="min", filename="best-{epoch}")
        trainer = L.Trainer(
            accelerator="cpu", devices=1, max_epochs=opts.epochs, logger=False, enable_progress_bar=False,
            enable_model_summary=False, callbacks=[best], default_root_dir=tmp,
            gradient_clip_val=recipe["trainer"]["gradient_clip_val"],
        )
        started = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(task, dm)
            seconds = time.perf_counter() - started
            (test,) = trainer.test(task, dm, ckpt_path="best", verbose=False)
        shutil.copy(best.best_model_path, ckpt)
    r = {"decoding": task.decoding, "test_der": float(test["test_der"]),
         "test_string_acc": float(test["test_string_acc"]),
         "best_epoch": float(Path(best.best_model_path).stem.split("epoch=")[1]), "seconds": seconds}
    print(f"   {mask}: {json.dumps(r)}", flush=True)
    return {"num_train": opts.num_train, "epochs": opts.epochs, **r, **evaluate(mask, ckpt, opts)}


# ---------------------------------------------------------------------------------------------------
# the store and the section


def _takes(store: dict[str, Any]) -> Any:
    """Every ``per_take`` record of the store, with the length of its strings."""
    for model in store.get("models", {}).values():
        for row in model.get("der", []):
            for where in (row, row.get("recipe", {})):
                if "per_take" in where:
                    yield row["length"], where["per_take"]


def pack(store: dict[str, Any]) -> dict[str, Any]:
    """The store with each length's test recordings and their digit counts kept once (``takes``), every
    decoding's ``per_take`` holding only its errors; a decoding of other recordings keeps its own lists."""
    out = copy.deepcopy(store)
    takes = out.setdefault("takes", {})
    for length, per_take in _takes(out):
        shared = takes.setdefault(str(length), {"ids": per_take["ids"], "digits": per_take["digits"]})
        if "ids" in per_take and (per_take["ids"], per_take["digits"]) == (shared["ids"], shared["digits"]):
            del per_take["ids"], per_take["digits"]
    return out


def unpack(store: dict[str, Any]) -> dict[str, Any]:
    """The store as :func:`pack` took it: every ``per_take`` with its recordings and digit counts."""
    out = copy.deepcopy(store)
    for length, per_take in _takes(out):
        if "ids" not in per_take:
            per_take.update(out["takes"][str(length)])
    out.pop("takes", None)
    return out


def load_store() -> dict[str, Any]:
    """The stored parts and models (the study store's ``detail``)."""
    return unpack(json.loads(STORE.read_text()).get("detail", {})) if STORE.exists() else {}


#: The parts' options (``python -m studies speech_strings measure PART key=value ...``); the training budget is the
#: recipe's.
OPTIONS: dict[str, Any] = {
    "masks": list(MASKS), "cost_masks": list(COST_MASKS), "lengths": [1, 5, 10, 20],
    "cost_lengths": [1, 2, 5, 10, 20, 40], "batch": 16, "steps": 7,
    "num_train": _recipe()["data"]["init_args"]["num_train"], "epochs": _recipe()["trainer"]["max_epochs"],
    "digits_per_length": 1000, "stream_strings": 200, "checkpoint": None, "budget": "recipe budget", "seed": 0,
    "root": None,
}


def _models(part: str) -> Any:
    """The ``train`` (or ``eval``: decode the kept checkpoints again) part, one model per mask of ``masks``."""
    def run(opts: argparse.Namespace) -> dict[str, Any]:
        torch.set_num_threads(1)
        out = {}
        for mask in opts.masks:
            if mask not in MASKS:
                raise SystemExit(f"unknown mask {mask!r}; choose from {list(MASKS)}")
            key = model_key(mask, opts.seed)
            out[f"models/{key}"] = ({"seed": opts.seed, **train(opts, mask)} if part == "train" else {
                **opts.detail["models"][key], **evaluate(mask, _checkpoint(mask, opts.seed), opts)})
        return out

    return run


def _one(name: str, part: Any) -> Any:
    def run(opts: argparse.Namespace) -> dict[str, Any]:
        torch.set_num_threads(1)
        return {name: part(opts)}

    return run


MEASURE = {"cost": _one("cost", cost), "reference": _one("reference", reference), "train": _models("train"),
           "eval": _models("eval")}


if __name__ == "__main__":  # one setting of the cost part, in its own process (see :func:`cost`)
    _cost_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
