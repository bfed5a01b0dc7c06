"""Fusion you can trust: the audio-visual digits models under every condition of one fixed test draw.

Parts (:data:`MEASURE`, options :data:`OPTIONS`)::

    python -m studies fusion measure train run=RUN      # one training run of :data:`RUNS` (``fit``, no test)
    python -m studies fusion measure select             # the selection runs on the validation conditions
    python -m studies fusion measure select-combine     # what the chosen model's head averages, on them too
    python -m studies fusion measure evaluate-run run=RUN  # one final run on the test conditions, kept
    python -m studies fusion measure evaluate           # every final run on the test conditions, stored
    python -m studies fusion measure render             # the table of docs/recipes/multimodal.md

``train`` runs the candidate's recipe (``recipes/multimodal_digits.py``, or the study's
``legacy_recipe.py`` for the first default) ``fit --test_after_fit false`` (the best checkpoint is
validated, never tested) with its own run directory under ``runs/fusion_conditions/RUN``. The selection
runs (``sel_*``: the candidates of :data:`CANDIDATES`, a validation speaker never trained on) are scored
by ``select`` on the validation conditions (:data:`VALIDATION_CONDITIONS`: :data:`CONDITIONS` on the
validation pairs, and the held-out gate voices, speakers no candidate trains on) and the choice is
stored in ``studies/fusion/stores/fusion_selection.json``; the final fused runs (``fused_*``) train the
chosen config. ``select-combine`` then scores the chosen candidate's selection run with each of
:data:`COMBINES` (what its head's weights average: the segments' logits, as trained, or their
probabilities; no retraining) on the same validation conditions, and stores that choice beside the
first. ``evaluate-run`` classifies the test draw with one final run and keeps what it needs under
``studies/fusion/stores/fusion_cells/`` (:func:`evaluate_run`; committed, so that final runs trained in
different sessions meet); ``evaluate`` reads those, evaluates the final runs not kept yet, and so
classifies the fixed test draw (:data:`TEST_SEED`, :data:`TEST_PAIRS` pairs per test recording) under
every condition: the fused model, audio only, image only and their late ensemble (:func:`late_ensemble`),
and stores per-pair correctness, accuracies (mean ± std over the replicates: training seeds, or held-out-speaker folds)
and paired bootstrap intervals of every comparison (:func:`bootstrap_difference`) in
``studies/fusion/stores/fusion_conditions.json``; ``render`` writes the section of
docs/recipes/multimodal.md between the ``fusion_conditions`` markers from that store, and
``docs/make_figures.py fusion_conditions`` draws its figure (:func:`figure`).
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from studies._runner.stats import bootstrap_difference, commit, machine, moments

ROOT = Path(__file__).resolve().parents[2]
STORES = Path(__file__).with_name("stores")
RUNS_DIR = Path("runs") / "fusion_conditions"
STORE = STORES / "fusion_conditions.json"
SELECTION = STORES / "fusion_selection.json"
#: Where ``evaluate-run`` keeps what each final run classified, per test draw (see :func:`evaluate_run`).
CELLS = STORES / "fusion_cells"
PAGE = ROOT / "docs" / "recipes" / "multimodal.md"
START, END = "<!-- fusion_conditions:start -->", "<!-- fusion_conditions:end -->"

#: The test draw of the protocol: a test seed never used before, and pairs per test recording (own split:
#: 250 recordings x 4 = 1,000 pairs; a held-out speaker: 500 recordings x 2 = 1,000 pairs). The fourth
#: draw, for the fourth protocol (a gate that has met misread voices); the earlier ones are kept in
#: :data:`EARLIER`.
TEST_SEED = 15485863
#: The stores of the earlier test draws, by test seed (kept as they were; never rewritten).
EARLIER = {seed: STORES / f"fusion_conditions_draw{seed}.json"
           for seed in (2711, 7919, 104729)}
#: The protocol of :data:`SELECTION`'s record: 3 added the unfamiliar-voices condition and the gate candidate,
#: 4 the conflict-pair candidates. An earlier protocol's record is kept as ``fusion_selection_protocol<n>.json``
#: when ``select`` replaces it; its candidates whose selection run is not at hand keep their stored scores
#: (:func:`stored_scores`).
PROTOCOL = 4
TEST_PAIRS = {"own": 4, "speaker": 2}
SPEAKERS = ("george", "jackson", "lucas", "theo", "yweweler")
#: The selection runs' validation speaker (all of its takes outside the test set; never trained on).
VAL_SPEAKER = "jackson"
SEEDS = (0, 1, 2)
#: The conditions: AVDigitsDataModule options; "missing" removes the modality (its present flag false).
CONDITIONS: dict[str, dict[str, Any]] = {
    "clean": {},
    "audio 10 dB": {"audio_snr_db": 10.0},
    "audio 0 dB": {"audio_snr_db": 0.0},
    "audio -5 dB": {"audio_snr_db": -5.0},
    "image occluded": {"image_occlusion": 14},
    "image noise": {"image_noise": 0.5},
    "both corrupted": {"audio_snr_db": 0.0, "image_occlusion": 14},
    "audio missing": {"drop_modality": "audio"},
    "image missing": {"drop_modality": "image"},
}
HELD_OUT = "held-out speaker"
#: The Speech Commands folder (under the data folder) whose spoken digits are the gate voices
#: (``AVDigitsDataModule(gate_voices=...)``): its held-out half is a validation condition of voices that no
#: candidate trains on.
GATE_VOICES = "speech_commands_test_v0.02"
UNFAMILIAR = "unfamiliar voices"
#: The selection's conditions (validation pairs only): the nine conditions on the validation speaker's pairs
#: and the held-out gate voices, clean.
VALIDATION_CONDITIONS: dict[str, dict[str, Any]] = {**CONDITIONS, UNFAMILIAR: {"gate_voices": GATE_VOICES}}
#: Conditions with both modalities present (the "worth it" average), the held-out speaker included.
BOTH_PRESENT = [c for c in CONDITIONS if "missing" not in c] + [HELD_OUT]
RECIPE = "recipes/multimodal_digits.py"
#: The recipe of the first default (bottleneck fusion, the ``default`` candidate), kept in the study.
LEGACY_RECIPE = "studies/fusion/legacy_recipe.py"
_CONFIGS = "studies/fusion/configs"
#: The selection candidates, in the order that breaks ties: (recipe, overlay of its default config, or
#: None for the default itself). The chosen one, ``robust_conflict``, is the multimodal recipe's default.
CANDIDATES: dict[str, tuple[str, str | None]] = {
    "default": (LEGACY_RECIPE, None),
    "robust_late": (RECIPE, f"{_CONFIGS}/robust_late.yaml"),
    "robust_bottleneck": (RECIPE, f"{_CONFIGS}/robust_bottleneck.yaml"),
    "robust_gate": (RECIPE, f"{_CONFIGS}/robust_gate.yaml"),
    "robust_conflict_light": (RECIPE, f"{_CONFIGS}/robust_conflict_light.yaml"),
    "robust_conflict": (RECIPE, None),
}
PEERS = {"audio": (RECIPE, f"{_CONFIGS}/robust_audio.yaml"), "image": (RECIPE, f"{_CONFIGS}/robust_image.yaml")}
#: What the chosen model's head averages with its weights (``SegmentPoolingClassifier(combine=...)``), in
#: the order that breaks ties: the logits as trained first.
COMBINES = ("logits", "probabilities", "average")
MODELS = ("fused", "audio", "image", "ensemble")
BOOTSTRAP = 2000


def _runs() -> dict[str, dict[str, Any]]:
    """Every training run by name: its config (``"chosen"``: the selection's choice), seed and data options."""
    runs: dict[str, dict[str, Any]] = {}
    for name, config in CANDIDATES.items():
        runs[f"sel_{name}"] = {"config": config, "seed": 0, "data": {"val_speakers": [VAL_SPEAKER]}}
    for model in ("fused", "audio", "image"):
        config = PEERS.get(model, "chosen")
        for seed in SEEDS:
            runs[f"{model}_s{seed}"] = {"config": config, "seed": seed, "data": {}}
    for model in ("fused", "audio"):  # image only needs no fold: it never hears a speaker (image_s0 serves)
        config = PEERS.get(model, "chosen")
        for speaker in SPEAKERS:
            runs[f"{model}_{speaker}"] = {"config": config, "seed": 0, "data": {"test_speakers": [speaker]}}
    return runs


RUNS = _runs()


def chosen_config() -> tuple[str, str | None]:
    """The recipe and config the selection chose (``select`` must have run)."""
    if not SELECTION.exists():
        raise FileNotFoundError(f"{SELECTION} is missing: run python -m studies fusion measure select first")
    return CANDIDATES[json.loads(SELECTION.read_text())["choice"]]


def fit_command(name: str, runs_dir: Path = RUNS_DIR, extra: Sequence[str] = ()) -> list[str]:
    """The recipe command of run ``name`` (the best checkpoint validated only; no test number); ``extra``
    arguments last (a smaller run in the tests)."""
    run = RUNS[name]
    config = chosen_config() if run["config"] == "chosen" else run["config"]
    out = runs_dir / name
    loggers = [
        {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": str(out), "name": ""}},
        {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": str(out), "name": "csv"}},
    ]
    recipe, overlay = config
    cmd = [recipe, "fit", *([f"--config={overlay}"] if overlay else [])]
    cmd += [f"--seed_everything={run['seed']}", "--torch_threads=1", "--test_after_fit=false",
            "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={out}",
            f"--trainer.logger={json.dumps(loggers)}"]
    cmd += [f"--data.{key}=[{','.join(value)}]" for key, value in run["data"].items()]
    return cmd + list(extra)


def best_checkpoint(run_dir: Path) -> Path:
    """The run's best checkpoint (``best-*.ckpt``)."""
    found = sorted(run_dir.glob("**/checkpoints/best-*.ckpt"))
    if len(found) != 1:
        raise FileNotFoundError(f"expected one best-*.ckpt under {run_dir}, found {[str(p) for p in found]}")
    return found[0]


def train(name: str, runs_dir: Path = RUNS_DIR, extra: Sequence[str] = ()) -> dict[str, Any]:
    """Run ``fit`` for run ``name`` and write ``run.json`` (command, wall time, best checkpoint, validation)."""
    cmd = fit_command(name, runs_dir, extra)
    out = runs_dir / name
    if (ROOT / out).exists():  # a rerun starts afresh (one best checkpoint per run directory)
        shutil.rmtree(ROOT / out)
    (ROOT / out).mkdir(parents=True)
    started = time.time()
    subprocess.run([sys.executable, *cmd], cwd=ROOT, check=True, env={**_env(), "OMP_NUM_THREADS": "1"})
    ckpt = best_checkpoint(ROOT / out if not out.is_absolute() else out)
    (metrics,) = (ROOT / out).glob("**/metrics.json")
    record = {"name": name, "command": " ".join(["python", *cmd]), "seconds": round(time.time() - started, 1),
              "checkpoint": str(ckpt.relative_to(ROOT / out)), "validation": json.loads(metrics.read_text()),
              "machine": machine(), "commit": commit()}
    (ROOT / out / "run.json").write_text(json.dumps(record, indent=1) + "\n")
    return record


def _env() -> dict[str, str]:
    import os

    return dict(os.environ)


# --------------------------------------------------------------------------------------------- evaluation


def chosen_combine() -> str:
    """What the fused model's head averages: the choice of ``select-combine``, else its logits (as trained)."""
    if not SELECTION.exists():
        return COMBINES[0]
    return str((json.loads(SELECTION.read_text()).get("combine") or {}).get("choice", COMBINES[0]))


def load_model(run_dir: Path, combine: str | None = None) -> Any:
    """The best checkpoint of a run, as the trained task in eval mode (its hyperparameters rebuild it), its
    head set to ``combine`` when given (a head without segments' predictions refuses one)."""
    from attnmm.lightning import ClassificationTask

    task = ClassificationTask.load_from_checkpoint(best_checkpoint(run_dir), map_location="cpu", weights_only=True)
    if combine is not None:
        if not hasattr(task.head, "combine"):
            raise ValueError(f"the model of {run_dir} has a {type(task.head).__name__}, which has no combine")
        task.head.combine = combine
    return task.eval()


def modalities(task: Any) -> list[str]:
    """The modalities a task reads (its multimodal adapter's names)."""
    return list(task.adapter.names)


def condition_set(split: str, condition: dict[str, Any], data: dict[str, Any], root: str | None = None) -> Any:
    """The pairs of ``split`` (``"val"`` or ``"test"``) under ``condition``: the DataModule of the run's data
    options (``data``: val_speakers or test_speakers) with the condition's corruptions; a missing modality is
    removed from every pair (its present flag false), validation pairs included. A condition with
    ``gate_voices`` is the held-out gate voices' pairs (validation only)."""
    from attnmm.data import AVDigitsDataModule

    options = {k: v for k, v in condition.items() if k != "drop_modality"}
    if "gate_voices" in options and split != "val":
        raise ValueError("the gate voices' held-out pairs are a validation condition; the test has none")
    pairs = TEST_PAIRS["speaker" if data.get("test_speakers") else "own"]
    dm = AVDigitsDataModule(root=root, test_seed=TEST_SEED, test_pairs_per_recording=pairs, **data, **options)
    dm.setup("validate" if split == "val" else "test")
    dataset = copy.copy(dm.gate_val_set if "gate_voices" in options else getattr(dm, f"{split}_set"))
    dataset.drop_modality = condition.get("drop_modality")
    return dataset


@torch.no_grad()
def predict(task: Any, dataset: Any, batch_size: int = 100) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Class probabilities (P, C), labels (P,) and, with a gated head, the mean weight of each segment (K,)."""
    from torch.utils.data import DataLoader

    from attnmm.data.avdigits import collate_avdigits

    probs, labels, weights = [], [], []
    gated = getattr(task.head, "gate", None) is not None
    for batch in DataLoader(dataset, batch_size, shuffle=False, collate_fn=collate_avdigits):
        h, tokens, _ = task.encode(batch)
        probs.append(torch.softmax(task.head(h, tokens).float(), -1))
        labels.append(batch["label"])
        if gated:
            weights.append(task.head.segment_weights(h, tokens))
    alpha = torch.cat(weights).mean(0).numpy() if gated else None
    return torch.cat(probs).numpy(), torch.cat(labels).numpy(), alpha


def late_ensemble(audio: np.ndarray | None, image: np.ndarray | None) -> np.ndarray:
    """The late ensemble's probabilities (P, C): the mean of the audio-only and image-only models'
    probabilities; with a modality missing (``None``), the present one's alone.

    Examples:
        >>> import numpy as np
        >>> late_ensemble(np.array([[0.8, 0.2]]), np.array([[0.2, 0.8]])).tolist()
        [[0.5, 0.5]]
        >>> late_ensemble(None, np.array([[0.3, 0.7]])).tolist()
        [[0.3, 0.7]]
    """
    present = [p for p in (audio, image) if p is not None]
    if not present:
        raise ValueError("the late ensemble needs at least one modality's probabilities")
    return sum(present) / len(present)


def bits(correct: np.ndarray) -> str:
    """Per-pair correctness as a string of 0/1 (the stored form)."""
    return "".join("1" if c else "0" for c in correct)


def unbits(text: str) -> np.ndarray:
    return np.frombuffer(text.encode(), dtype=np.uint8) == ord("1")


def _evaluate_runs(
    names: Sequence[str], split: str, root: str | None, runs_dir: Path, combine: dict[str, str] | None = None
) -> dict[str, dict[str, Any]]:
    """Per run and condition: the probabilities' per-pair correctness and the gate's weights (no printing);
    ``combine`` sets the head of the runs it names."""
    out: dict[str, dict[str, Any]] = {}
    for name in names:
        run = RUNS[name]
        task = load_model(ROOT / runs_dir / name, (combine or {}).get(name))
        own = VALIDATION_CONDITIONS if split == "val" else CONDITIONS
        conditions = dict(own) if "test_speakers" not in run["data"] else {HELD_OUT: {}}
        cells: dict[str, Any] = {}
        for cond, options in conditions.items():
            if options.get("drop_modality") and modalities(task) == [options["drop_modality"]]:
                continue  # a single-modality model without its modality: nothing to classify
            probs, labels, alpha = predict(task, condition_set(split, options, run["data"], root))
            cells[cond] = {"probs": probs, "labels": labels, "alpha": None if alpha is None else alpha.tolist()}
        out[name] = cells
    return out


def _scores(cells: dict[str, Any]) -> dict[str, float]:
    """Accuracy (%) per condition of one run's validation cells, and their mean over
    :data:`VALIDATION_CONDITIONS`."""
    scores = {c: round(100 * float((v["probs"].argmax(1) == v["labels"]).mean()), 2) for c, v in cells.items()}
    scores["mean"] = round(statistics.fmean(scores[c] for c in VALIDATION_CONDITIONS), 2)
    return scores


def stored_scores(path: Path | None = None) -> tuple[dict[str, dict[str, float]], dict[str, Any] | None, int | None]:
    """The validation scores an earlier protocol's selection stored (``path``, when its protocol is
    earlier than :data:`PROTOCOL`, else the newest ``fusion_selection_protocol<n>.json`` below it), its
    ``combine`` record and its protocol; nothing when there is none or when it scored other conditions
    (its scores would not compare)."""
    path = SELECTION if path is None else path
    records = []
    if path.exists():
        records.append(json.loads(path.read_text()))
    records += [json.loads(p.read_text()) for p in sorted(path.parent.glob("fusion_selection_protocol*.json"),
                                                             key=lambda p: int(p.stem.rsplit("protocol", 1)[1]),
                                                             reverse=True)]
    for record in records:
        if record.get("protocol", 2) < PROTOCOL:
            if record.get("conditions") != list(VALIDATION_CONDITIONS):
                return {}, None, None
            return record["scores"], record.get("combine"), record.get("protocol", 2)
    return {}, None, None


def select(root: str | None = None, runs_dir: Path = RUNS_DIR) -> dict[str, Any]:
    """Score each selection run on the validation conditions and choose by the rule: the highest mean
    validation accuracy over the conditions (a tie: the earlier candidate). Only validation numbers. A
    candidate whose selection run is not at hand keeps the scores an earlier protocol stored for it on the
    same validation pairs and conditions (:func:`stored_scores`); one with neither is an error."""
    stored, _, earlier = stored_scores()
    at_hand = [c for c in CANDIDATES if (ROOT / runs_dir / f"sel_{c}" / "run.json").exists()]
    missing = [c for c in CANDIDATES if c not in at_hand and c not in stored]
    if missing:
        raise FileNotFoundError(f"selection runs not trained yet, and no stored scores of them: "
                                f"{[f'sel_{c}' for c in missing]}")
    cells = _evaluate_runs([f"sel_{c}" for c in at_hand], "val", root, runs_dir)
    scores: dict[str, dict[str, float]] = {}
    for candidate in CANDIDATES:
        scores[candidate] = _scores(cells[f"sel_{candidate}"]) if candidate in at_hand else stored[candidate]
    choice = max(CANDIDATES, key=lambda c: (scores[c]["mean"], -list(CANDIDATES).index(c)))
    record = {"protocol": PROTOCOL, "split": "val", "val_speaker": VAL_SPEAKER,
              "conditions": list(VALIDATION_CONDITIONS), "scores": scores, "choice": choice,
              "stored": {c: f"protocol {earlier}" for c in CANDIDATES if c not in at_hand},
              "rule": "highest mean validation accuracy over the conditions; a tie: the earlier candidate",
              "machine": machine(), "commit": commit()}
    SELECTION.parent.mkdir(exist_ok=True)
    if SELECTION.exists():  # an earlier protocol's record is kept as it was
        earlier = json.loads(SELECTION.read_text()).get("protocol", 2)
        kept = SELECTION.with_name(f"fusion_selection_protocol{earlier}.json")
        if earlier != PROTOCOL and not kept.exists():
            shutil.copyfile(SELECTION, kept)
    SELECTION.write_text(json.dumps(record, indent=1) + "\n")
    return record


def select_combine(root: str | None = None, runs_dir: Path = RUNS_DIR) -> dict[str, Any]:
    """Score the chosen candidate's selection run with each of :data:`COMBINES` on the validation
    conditions and choose by the selection's rule (the highest mean; a tie: the earlier); stored under
    ``"combine"`` in the selection's record. Only validation numbers."""
    record = json.loads(SELECTION.read_text())
    name = f"sel_{record['choice']}"
    if record["choice"] in record.get("stored", {}):  # chosen from stored scores: its stored combine stands
        _, combine, earlier = stored_scores(SELECTION.with_name(f"fusion_selection_protocol{PROTOCOL - 1}.json"))
        if combine is None or combine.get("run") != name:
            raise FileNotFoundError(f"{name} is not at hand and no earlier protocol stored its combine choice")
        record["combine"] = {**combine, "stored": f"protocol {earlier}"}
        SELECTION.write_text(json.dumps(record, indent=1) + "\n")
        return record["combine"]
    scores: dict[str, dict[str, float]] = {}
    for combine in COMBINES:
        scores[combine] = _scores(_evaluate_runs([name], "val", root, runs_dir, {name: combine})[name])
    choice = max(COMBINES, key=lambda c: (scores[c]["mean"], -COMBINES.index(c)))
    record["combine"] = {"run": name, "split": "val", "scores": scores, "choice": choice,
                         "rule": "highest mean validation accuracy over the conditions; a tie: the earlier",
                         "machine": machine(), "commit": commit()}
    SELECTION.write_text(json.dumps(record, indent=1) + "\n")
    return record["combine"]


def _replicates(model: str) -> dict[str, list[str]]:
    """The runs of each replicate kind: the seeds (own split) and the held-out-speaker folds."""
    seeds = [f"{model}_s{s}" for s in SEEDS]
    if model == "image":  # image only hears no one: the seed-0 model serves every fold
        return {"own": seeds, "speaker": ["image_s0"] * len(SPEAKERS)}
    return {"own": seeds, "speaker": [f"{model}_{s}" for s in SPEAKERS]}


def cells_path(name: str) -> Path:
    """Where :func:`evaluate_run` keeps what final run ``name`` classified on this protocol's test draw."""
    return CELLS / f"draw{TEST_SEED}" / f"{name}.npz"


def evaluate_run(name: str, root: str | None = None, runs_dir: Path = RUNS_DIR) -> Path:
    """One final run on every test condition of the draw, kept at :func:`cells_path` with its run record
    (committed, so that final runs trained in different sessions meet at :func:`evaluate`): a fused run's
    predicted classes (its head with the chosen ``combine``) and the gate's mean weights, a single-modality
    run's class probabilities (the late ensemble averages them); the seed-0 image-only run also on each
    held-out speaker's pairs. Nothing is printed or scored here."""
    if name not in RUNS or name.startswith("sel_"):
        raise ValueError(f"evaluate-run takes a final run, one of {[n for n in RUNS if not n.startswith('sel_')]}")
    record = ROOT / runs_dir / name / "run.json"
    if not record.exists():
        raise FileNotFoundError(f"run not trained yet: {name} (no {record})")
    combine = chosen_combine() if name.startswith("fused_") else None
    cells = _evaluate_runs([name], "test", root, runs_dir, None if combine is None else {name: combine})[name]
    if name == "image_s0":  # the image-only model on each fold's pairs (the folds' draw differs from the own split's)
        task = load_model(ROOT / runs_dir / name)
        for speaker in SPEAKERS:
            probs, labels, _ = predict(task, condition_set("test", {}, {"test_speakers": [speaker]}, root))
            cells[f"{HELD_OUT}@{speaker}"] = {"probs": probs, "labels": labels, "alpha": None}
    arrays: dict[str, np.ndarray] = {}
    for i, cell in enumerate(cells.values()):
        arrays[f"labels_{i}"] = cell["labels"].astype(np.int16)
        if combine is None:
            arrays[f"probs_{i}"] = cell["probs"].astype(np.float32)
        else:
            arrays[f"pred_{i}"] = cell["probs"].argmax(1).astype(np.int16)
        if cell["alpha"] is not None:
            arrays[f"alpha_{i}"] = np.asarray(cell["alpha"], dtype=np.float64)
    meta = {"name": name, "run": json.loads(record.read_text()), "test_seed": TEST_SEED, "combine": combine,
            "conditions": list(cells), "classes": int(next(iter(cells.values()))["probs"].shape[1]),
            "machine": machine(), "commit": commit()}
    path = cells_path(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, meta=np.array(json.dumps(meta)), **arrays)
    return path


def load_cells(name: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """The record and the cells (per condition: probabilities, labels, gate weights) that
    :func:`evaluate_run` kept for run ``name``; a fused run's probabilities are its predictions one-hot."""
    with np.load(cells_path(name)) as kept:
        meta = json.loads(str(kept["meta"]))
        cells = {}
        for i, cond in enumerate(meta["conditions"]):
            labels = kept[f"labels_{i}"].astype(np.int64)
            if f"probs_{i}" in kept:
                probs = kept[f"probs_{i}"]
            else:
                probs = np.eye(meta["classes"], dtype=np.float32)[kept[f"pred_{i}"]]
            alpha = kept[f"alpha_{i}"].tolist() if f"alpha_{i}" in kept else None
            cells[cond] = {"probs": probs, "labels": labels, "alpha": alpha}
    if meta["test_seed"] != TEST_SEED:
        raise ValueError(f"{cells_path(name)} holds test seed {meta['test_seed']}, not this draw's {TEST_SEED}")
    return meta, cells


def evaluate(root: str | None = None, runs_dir: Path = RUNS_DIR) -> dict[str, Any]:
    """Every final run on every test condition; the store of per-pair correctness, accuracies and intervals.
    A run already kept by :func:`evaluate_run` (a run trained in an earlier session, whose checkpoint may be
    gone) is read from its cells; every other is evaluated and kept now."""
    names = [n for n in RUNS if not n.startswith("sel_")]
    missing = [n for n in names if not cells_path(n).exists() and not (ROOT / runs_dir / n / "run.json").exists()]
    if missing:
        raise FileNotFoundError(f"runs not trained yet: {missing}")
    for seed, earlier in EARLIER.items():
        if STORE.exists() and json.loads(STORE.read_text())["test_seed"] == seed and not earlier.exists():
            shutil.copyfile(STORE, earlier)  # the earlier draw's store is kept as it was
    combine = chosen_combine()
    cells: dict[str, dict[str, Any]] = {}
    records: dict[str, Any] = {}
    for name in names:
        if not cells_path(name).exists():
            evaluate_run(name, root, runs_dir)
        meta, cells[name] = load_cells(name)
        if meta["combine"] not in (None, combine):
            raise ValueError(f"{cells_path(name)} was kept with combine={meta['combine']!r}, the choice is {combine!r}")
        records[name] = meta["run"]
    for speaker in SPEAKERS:
        cells[f"image_on_{speaker}"] = {HELD_OUT: cells["image_s0"].pop(f"{HELD_OUT}@{speaker}")}
    table: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in MODELS}
    for cond in [*CONDITIONS, HELD_OUT]:
        kind = "speaker" if cond == HELD_OUT else "own"
        reps = {m: _replicates(m)[kind] for m in ("fused", "audio", "image")}
        if kind == "speaker":
            reps["image"] = [f"image_on_{s}" for s in SPEAKERS]
        for r in range(len(reps["fused"])):
            got = {m: cells[reps[m][r]].get(cond) for m in ("fused", "audio", "image")}
            labels = got["fused"]["labels"]
            probs = {m: (None if got[m] is None else got[m]["probs"]) for m in got}
            probs["ensemble"] = late_ensemble(probs["audio"], probs["image"])
            for m in MODELS:
                if probs[m] is None:
                    continue
                entry = table[m].setdefault(cond, {"replicates": [], "correct": [], "alpha": []})
                entry["replicates"].append(reps[m][r] if m != "ensemble" else f"{reps['audio'][r]}+{reps['image'][r]}")
                entry["correct"].append(bits(probs[m].argmax(1) == labels))
                if m == "fused" and got["fused"]["alpha"] is not None:
                    entry["alpha"].append(got["fused"]["alpha"])
    store = {"test_seed": TEST_SEED, "test_pairs": TEST_PAIRS, "conditions": CONDITIONS, "held_out": HELD_OUT,
             "combine": combine,
             "selection": json.loads(SELECTION.read_text()) if SELECTION.exists() else None,
             "runs": records,
             "cells": table, "machine": machine(), "commit": commit()}
    store["summary"] = summarize(store)
    STORE.parent.mkdir(exist_ok=True)
    STORE.write_text(json.dumps(store, indent=1) + "\n")
    return store


def summarize(store: dict[str, Any]) -> dict[str, Any]:
    """Accuracies (mean ± std over the replicates) and the paired bootstrap of the fused model against each peer."""
    cells = store["cells"]
    conds = [*store["conditions"], store["held_out"]]
    acc: dict[str, dict[str, Any]] = {m: {} for m in MODELS}
    versus: dict[str, dict[str, Any]] = {}
    for cond in conds:
        for m in MODELS:
            if cond in cells[m]:
                values = [100 * float(unbits(c).mean()) for c in cells[m][cond]["correct"]]
                spread = moments(values)
                acc[m][cond] = {"mean": round(spread["mean"], 2), "std": round(spread["std"], 2),
                                "values": [round(v, 2) for v in values]}
        fused = [unbits(c) for c in cells["fused"][cond]["correct"]]
        groups = [0] * len(fused) if cond != store["held_out"] else list(range(len(fused)))
        versus[cond] = {}
        for peer in ("audio", "image", "ensemble"):
            if cond in cells[peer]:
                other = [unbits(c) for c in cells[peer][cond]["correct"]]
                versus[cond][peer] = bootstrap_difference(fused, other, groups, BOOTSTRAP)
    return {"accuracy": acc, "fused_minus": versus, "targets": targets(acc, versus, store)}


def targets(acc: dict[str, Any], versus: dict[str, Any], store: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, met or missed, with the margins (accuracy points)."""
    never_worse = {}
    for cond in versus:
        peers = {p: acc[p][cond]["mean"] for p in ("audio", "image", "ensemble") if cond in acc[p]}
        best = max(peers, key=lambda p: peers[p])
        margin = round(acc["fused"][cond]["mean"] - peers[best], 2)
        never_worse[cond] = {"best_peer": best, "margin": margin, "met": margin >= -1.0}
    both = [c for c in BOTH_PRESENT if c in versus]
    avg_gain = round(statistics.fmean(acc["fused"][c]["mean"] - acc["ensemble"][c]["mean"] for c in both), 2)
    # the average gain's interval: the mean over the conditions of each condition's resampled difference
    gains = [versus[c]["ensemble"] for c in both]
    singles = {p: acc[p]["both corrupted"]["mean"] for p in ("audio", "image")}
    better = max(singles, key=lambda p: singles[p])
    both_gain = round(acc["fused"]["both corrupted"]["mean"] - singles[better], 2)
    clean = acc["fused"]["clean"]["mean"]
    minutes = [r["seconds"] / 60 for r in store["runs"].values()]
    return {
        "never_worse": never_worse,
        "never_worse_met": all(v["met"] for v in never_worse.values()),
        "worth_it_average": {"gain": avg_gain, "conditions": both, "met": avg_gain >= 1.0,
                             "low": round(statistics.fmean(g["low"] for g in gains), 2)},
        "worth_it_both_corrupted": {"better_single": better, "gain": both_gain, "met": both_gain >= 5.0,
                                    "interval": versus["both corrupted"][better]},
        "clean": {"fused": clean, "met": clean >= 99.5},
        "training_minutes": {"max": round(max(minutes), 1), "met": max(minutes) <= 15.0},
    }


# ------------------------------------------------------------------------------------------------- docs


_COMBINE_WORDS = {"logits": "logits under its gate", "probabilities": "probabilities under its gate",
                  "average": "probabilities with equal weights"}


def _cell(a: dict[str, Any] | None) -> str:
    return "—" if a is None else f"{a['mean']:.2f} ± {a['std']:.2f}"


def _diff(d: dict[str, Any] | None) -> str:
    return "—" if d is None else f"{d['diff']:+.2f} [{d['low']:+.2f}, {d['high']:+.2f}]"


def _shown(candidate: str) -> str:
    """Where a candidate's config is: its recipe's default, or an overlay of it."""
    recipe, overlay = CANDIDATES.get(candidate, (candidate, None))
    return f"`{recipe}`'s default config" if overlay is None else f"`{recipe}` with `{overlay}`"


def render_section(store: dict[str, Any]) -> str:
    """The Markdown between the markers, from the stored results."""
    s = store["summary"]
    acc, versus, t = s["accuracy"], s["fused_minus"], s["targets"]
    choice = (store.get("selection") or {}).get("choice", "?")
    conds = [*store["conditions"], store["held_out"]]
    lines = [
        START,
        "<!-- Written by `python -m studies fusion measure render` from "
        "studies/fusion/stores/fusion_conditions.json; edit the module, not this section. -->", "",
        "## Fusion under every condition", "",
        f"The fused model chosen on validation (`{choice}`: {_shown(choice)}, its head averaging the "
        f"segments' {_COMBINE_WORDS[store.get('combine', 'logits')]}) against audio only, image "
        "only and their late ensemble (the mean of the two models' probabilities; with a modality missing, the "
        f"present one's), on one test draw (test seed {store['test_seed']}: 1,000 pairs, each test recording "
        f"paired with {store['test_pairs']['own']} MNIST test images; the held-out-speaker rows: 1,000 pairs of "
        "each fold's speaker, never trained on, with clean images). The test recordings are the same in every "
        "draw of the study (FSDD's takes 0-4; a draw changes the image pairing and the noise), and earlier "
        "protocols' test numbers on them were seen before this one was written. Accuracy (%), mean ± std over "
        "3 training seeds (the held-out speaker: over the 5 folds, one seed each); the differences are the fused "
        "model's, with a 95% paired bootstrap interval over the test pairs. The protocols, the earlier draws' numbers "
        "and the caveats are in [the fusion study](../../studies/fusion/README.md).", "",
        f"**{HELD_OUT.capitalize()} (exploratory: selection saw test recordings).** The held-out-speaker "
        "row reuses the same five FSDD speakers' recordings in every protocol (a new test seed changes only the "
        "image pairing and the noise); the fourth protocol was designed from george's fold of an earlier draw "
        "and tested on the same recordings; and the validation speaker jackson's takes 5-49 are 450 of the 500 "
        "recordings of jackson's test fold. The other rows are FSDD's test takes 0-4, never used in selection.",
        "",
        "| condition | fused | audio only | image only | late ensemble | fused − audio | fused − image "
        "| fused − ensemble |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in conds:
        lines.append(
            f"| {c}{' (exploratory)' if c == HELD_OUT else ''} | **{_cell(acc['fused'].get(c))}** | "
            f"{_cell(acc['audio'].get(c))} | "
            f"{_cell(acc['image'].get(c))} | {_cell(acc['ensemble'].get(c))} | {_diff(versus[c].get('audio'))} | "
            f"{_diff(versus[c].get('image'))} | {_diff(versus[c].get('ensemble'))} |"
        )
    nw = t["never_worse"]
    missed = [f"{c} ({v['margin']:+.2f} against {v['best_peer']})" for c, v in nw.items() if not v["met"]]
    w, wb = t["worth_it_average"], t["worth_it_both_corrupted"]
    lines += [
        "", "![accuracy per condition](../figures/fusion_conditions.png)", "",
        "Targets:", "",
        f"- never worse (fused >= the best peer − 1 point on every condition): "
        f"**{'met' if t['never_worse_met'] else 'missed'}**"
        + ("" if not missed else f"; missed on {', '.join(missed)}") + ";",
        f"- worth it, on average over the conditions with both modalities: fused − late ensemble = {w['gain']:+.2f} "
        f"points (1 needed): **{'met' if w['met'] else 'missed'}**;",
        f"- worth it when both are corrupted: fused − {wb['better_single']} only = {wb['gain']:+.2f} points "
        f"(5 needed; interval {_diff(wb['interval'])}): **{'met' if wb['met'] else 'missed'}**;",
        f"- clean accuracy {t['clean']['fused']:.2f}% (99.5 needed): **{'met' if t['clean']['met'] else 'missed'}**;",
        f"- the longest training {t['training_minutes']['max']:.1f} min on one thread (15 allowed): "
        f"**{'met' if t['training_minutes']['met'] else 'missed'}**.",
    ]
    alphas = {c: store["cells"]["fused"][c]["alpha"] for c in conds if store["cells"]["fused"][c].get("alpha")}
    if alphas:
        names = ["audio", "image", "fusion"][: len(next(iter(alphas.values()))[0])]
        lines += ["", "The gate's mean weights (" + ", ".join(names) + ") per condition, over the replicates: "
                  + "; ".join(f"{c}: " + "/".join(f"{x:.2f}" for x in np.mean(v, 0)) for c, v in alphas.items()) + "."]
    lines.append(END)
    return "\n".join(lines) + "\n"


def render_page(page: str, store: dict[str, Any]) -> str:
    """``page`` with the section between the markers replaced (appended when the markers are absent)."""
    from benchmarks._page import splice

    return splice(page, render_section(store), START, END)


def figure(store: dict[str, Any]) -> Any:
    """Accuracy per condition, one line per model (mean over the replicates, the std as a band)."""
    from matplotlib.figure import Figure

    acc = store["summary"]["accuracy"]
    conds = [*store["conditions"], store["held_out"]]
    fig = Figure(figsize=(9.6, 4.0), layout="constrained")
    ax = fig.subplots()
    labels = {"fused": "fused (chosen)", "audio": "audio only", "image": "image only", "ensemble": "late ensemble"}
    for m in MODELS:
        xs = [i for i, c in enumerate(conds) if c in acc[m]]
        mean = np.array([acc[m][conds[i]]["mean"] for i in xs])
        std = np.array([acc[m][conds[i]]["std"] for i in xs])
        ax.plot(xs, mean, marker="o", label=labels[m], linewidth=2.2 if m == "fused" else 1.2)
        ax.fill_between(xs, mean - std, mean + std, alpha=0.15)
    ax.set_xticks(range(len(conds)), conds, rotation=30, ha="right")
    ax.set(ylabel="test accuracy (%)", ylim=(0, 101))
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    return fig


def load_store(path: Path = STORE) -> dict[str, Any]:
    return json.loads(path.read_text())


def _named(opts: argparse.Namespace) -> str:
    if opts.run not in RUNS:
        raise SystemExit(f"give a run: run=NAME, one of {list(RUNS)}")
    return str(opts.run)


def _keys(record: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: record[k] for k in keys}


def _part(do: Any) -> Any:
    """A part of ``python -m studies fusion measure``: one thread, its own stores (nothing in the study's)."""
    def run(opts: argparse.Namespace) -> dict[str, Any]:
        torch.set_num_threads(1)
        out = do(opts, Path(opts.runs_dir))
        if out is not None:
            print(out if isinstance(out, str) else json.dumps(out, indent=1))
        return {}

    return run


def _evaluate(opts: argparse.Namespace, runs_dir: Path) -> Any:
    store = evaluate(opts.root, runs_dir)
    PAGE.write_text(render_page(PAGE.read_text(), store))
    return store["summary"]["targets"]


#: The options of the parts: the run (train, command, evaluate-run), the data root and where the runs are.
OPTIONS = {"run": None, "root": None, "runs_dir": str(RUNS_DIR)}
MEASURE = {
    "command": _part(lambda o, d: " ".join(["python", *fit_command(_named(o), d)])),
    "train": _part(lambda o, d: _keys(train(_named(o), d), "name", "seconds", "checkpoint", "validation")),
    "select": _part(lambda o, d: _keys(select(o.root, d), "scores", "choice")),
    "select-combine": _part(lambda o, d: _keys(select_combine(o.root, d), "scores", "choice")),
    "evaluate-run": _part(lambda o, d: f"kept {evaluate_run(_named(o), o.root, d)}"),
    "evaluate": _part(_evaluate),
    "render": _part(lambda o, d: PAGE.write_text(render_page(PAGE.read_text(), load_store())) and f"wrote {PAGE}"),
}
