"""Unseen speakers, leave one speaker out (protocols 1-3 of the speakers study): ``python -m studies.speakers.loso``.

For each of FSDD's five speakers (fold ``i``: test speaker ``SPEAKERS[i]``), the speech recipe is
trained on three speakers, its checkpoint chosen on the next speaker in the cyclic order
(``--data.val_speakers``, never trained on) and tested on the held-out one
(``--data.test_speakers``). Each candidate of :data:`CANDIDATES` (the adapter's options: SpecAugment
alone, + per-utterance normalisation, + speed perturbation and noise; and the model's of
:data:`MODEL_OPTIONS`: starting from the backbone pretrained on Speech Commands, frozen or not for the
first epochs) runs every fold, one ``fit`` at a time in a fresh process (one thread). The rule that
picks a candidate reads validation numbers only: the highest mean validation score over the folds
(studies/speakers/README.md).

Results go to ``studies/speakers/stores/speakers_<name>.json`` after every run (a rerun skips the runs
already stored with the same command), and a markdown table is printed::

    ATTNMM_DATA=/path/to/data python -m studies.speakers.loso                 # isolated digits
    ATTNMM_DATA=/path/to/data python -m studies.speakers.loso --task strings --candidates specaugment
    ATTNMM_DATA=/path/to/data python -m studies.speakers.loso --table-only   # the stored table again
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "speech_truncated.py"
RESULTS = Path(__file__).with_name("stores")
SPEAKERS = ("george", "jackson", "lucas", "theo", "yweweler")

#: Per task: its config, the data and adapter argument prefixes, the monitored validation metric and
#: the test metric (``higher`` says which way is better).
TASKS: dict[str, dict[str, Any]] = {
    "digits": {
        "config": "recipes/configs/speech_truncated.yaml",
        "data": "--data",
        "model": "--model",
        "adapter": "--model.adapter.init_args",
        "val": "val_acc", "test": "test_acc", "higher": True,
    },
    "strings": {
        "config": "recipes/configs/speech_truncated_strings.yaml",
        "data": "--data.init_args",
        "model": "--model.init_args",
        "adapter": "--model.init_args.adapter.init_args",
        "val": "val_der", "test": "test_der", "higher": False,
    },
}

_SPEED_NOISE = (
    '{"class_path": "attnmm.data.ChainAugment", "init_args": {"steps": ['
    '{"class_path": "attnmm.data.SpeedPerturb", "init_args": {"factors": [0.9, 1.0, 1.1]}}, '
    '{"class_path": "attnmm.data.AddNoise", "init_args": {"min_snr_db": 10.0, "max_snr_db": 30.0, "p": 0.5}}]}}'
)
#: The candidates: adapter options (``name=value`` after the task's adapter prefix). Each is the digits
#: config *as it is* plus its options: since the default took Speech Commands' voices (``extra_voices``,
#: the study's README) the earlier candidates' commands, run again, train with them too.
CANDIDATES: dict[str, list[str]] = {
    "specaugment": [],
    "norm": ["utterance_norm=true"],
    "norm_speed_noise": ["utterance_norm=true", f"waveform_augment={_SPEED_NOISE}"],
    "transfer": [],
    "transfer_freeze": [],
    "transfer_freeze_voices": [],
}
#: The backbone the transfer candidates start from: shipped in ``attnmm/pretrained/``, pretrained on Speech
#: Commands at 8 kHz (``recipes/configs/speech_truncated_pretrain.yaml``, docs/recipes/speech.md)
BACKBONE = "speech_commands_8k"
#: Candidates' options of the task module (``name=value`` after the task's model prefix)
MODEL_OPTIONS: dict[str, list[str]] = {
    "transfer": [f"init_from={BACKBONE}"],
    "transfer_freeze": [f"init_from={BACKBONE}", "freeze_encoder_epochs=5"],
    "transfer_freeze_voices": [f"init_from={BACKBONE}", "freeze_encoder_epochs=5"],
}
#: Candidates' options of the data module (``name=value`` after the task's data prefix; the digits task's
#: ``FSDDDataModule`` only): the spoken digits of Speech Commands' many voices join the training batches
DATA_OPTIONS: dict[str, list[str]] = {
    "transfer_freeze_voices": ["extra_voices=speech_commands_test_v0.02", "extra_voices_repeats=4"],
}


def fold_speakers(fold: int) -> tuple[str, str]:
    """(test speaker, validation speaker) of fold ``fold``: the speaker and the next one, cyclically."""
    return SPEAKERS[fold], SPEAKERS[(fold + 1) % len(SPEAKERS)]


def command(task: str, candidate: str, fold: int, extra: list[str], val_speaker: bool = True) -> list[str]:
    """The recipe's ``fit`` command line of one run (without the interpreter); without ``val_speaker``
    the four other speakers are all trained on and the config's ``val_fraction`` draw validates."""
    spec = TASKS[task]
    test, val = fold_speakers(fold)
    if candidate in DATA_OPTIONS and task != "digits":
        raise ValueError(f"candidate {candidate} sets options of the digits task's data module; not for --task {task}")
    return [
        "recipes/speech_truncated.py", "fit", f"--config={spec['config']}",
        f"{spec['data']}.test_speakers=[{test}]", *([f"{spec['data']}.val_speakers=[{val}]"] if val_speaker else []),
        *(f"{spec['adapter']}.{option}" for option in CANDIDATES[candidate]),
        *(f"{spec['model']}.{option}" for option in MODEL_OPTIONS.get(candidate, [])),
        *(f"{spec['data']}.{option}" for option in DATA_OPTIONS.get(candidate, [])),
        "--trainer.enable_progress_bar=false", *extra,
    ]


def _best_val(run_dir: Path, metric: str, higher: bool) -> float:
    """The best validation value of a run, from its CSV log (the checkpoint chosen on it)."""
    values = []
    for path in run_dir.glob("**/metrics.csv"):
        with path.open() as f:
            values += [float(row[metric]) for row in csv.DictReader(f) if row.get(metric)]
    if not values:
        raise RuntimeError(f"no {metric} logged under {run_dir}")
    return max(values) if higher else min(values)


def run(
    task: str, candidate: str, fold: int, extra: list[str], log_dir: Path, val_speaker: bool = True
) -> dict[str, Any]:
    """One ``fit`` in a temporary directory (one thread); its metrics, best validation value and wall time."""
    spec = TASKS[task]
    cmd = command(task, candidate, fold, extra, val_speaker)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    log = log_dir / f"{task}_{candidate}_fold{fold}.log"
    with tempfile.TemporaryDirectory() as tmp, log.open("w") as sink:
        start = time.perf_counter()
        # the run directory and the logs: the temporary folder (checkpoints are not kept)
        status = subprocess.call(
            [sys.executable, str(ROOT / cmd[0]), *cmd[1:], f"--trainer.default_root_dir={tmp}", _logger_arg(tmp)],
            cwd=ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
        )
        seconds = time.perf_counter() - start
        if status:
            raise RuntimeError(f"{' '.join(cmd)} failed (exit {status}); see {log}")
        (metrics_file,) = Path(tmp).glob("**/metrics.json")
        metrics = json.loads(metrics_file.read_text())
        best = _best_val(Path(tmp), spec["val"], spec["higher"])
    test, val = fold_speakers(fold)
    val = val if val_speaker else "draw"
    return {
        "task": task, "candidate": candidate, "fold": fold, "test_speaker": test, "val_speaker": val,
        "command": " ".join(cmd), "val": best, "test": metrics.get(spec["test"]), "metrics": metrics,
        "seconds": round(seconds, 1), "machine": _machine(),
    }


def _machine() -> str:
    import platform

    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return f"{platform.machine()}, {os.cpu_count()} cores, {stamp}"


def _logger_arg(save_dir: str) -> str:
    """The configs' two loggers, writing under ``save_dir``."""
    loggers = [
        {"class_path": "lightning.pytorch.loggers.TensorBoardLogger", "init_args": {"save_dir": save_dir, "name": ""}},
        {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": save_dir, "name": "csv"}},
    ]
    return f"--trainer.logger={json.dumps(loggers)}"


def _mean_std(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}" if values else "-"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values):.2f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def table(runs: list[dict[str, Any]]) -> str:
    """Markdown: one row per candidate, the validation and test score of each fold and their mean ± std
    (sample standard deviation over the folds), in percent."""
    folds = sorted({r["fold"] for r in runs})
    val_of = {r["fold"]: r.get("val_speaker", fold_speakers(r["fold"])[1]) for r in runs}
    head = "| candidate | " + " | ".join(f"{fold_speakers(f)[0]} (val {val_of[f]})" for f in folds)
    lines = [head + " | val mean ± std | test mean ± std |", "|---" * (len(folds) + 3) + "|"]
    for candidate in dict.fromkeys(r["candidate"] for r in runs):
        mine = {r["fold"]: r for r in runs if r["candidate"] == candidate}
        cells = [f"{100 * mine[f]['val']:.1f} / {_pct(mine[f]['test'])}" if f in mine else "-" for f in folds]
        vals = [100 * r["val"] for r in mine.values()]
        tests = [100 * r["test"] for r in mine.values() if r["test"] is not None]
        lines.append(f"| {candidate} | " + " | ".join(cells) + f" | {_mean_std(vals)} | {_mean_std(tests)} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--task", choices=sorted(TASKS), default="digits")
    parser.add_argument("--candidates", nargs="+", choices=sorted(CANDIDATES), default=list(CANDIDATES))
    parser.add_argument("--folds", nargs="+", type=int, default=list(range(len(SPEAKERS))))
    parser.add_argument("--extra", action="append", default=[], help="more recipe arguments, e.g. --extra=--x=1")
    parser.add_argument("--name", default=None, help="results file speakers_<name>.json (default: the task)")
    parser.add_argument(
        "--validation", choices=["speaker", "draw"], default="speaker",
        help="speaker: the next speaker validates (3 trained on); draw: the 4 others are trained on, "
        "the config's val_fraction of their takes validates",
    )
    parser.add_argument("--table-only", action="store_true", help="print the stored results' table")
    parser.add_argument(
        "--no-test", action="store_true",
        help="selection runs: validate the chosen checkpoint instead of testing it (--test_after_fit=false), so "
        "that no test number is computed, printed or stored",
    )
    args = parser.parse_args(argv)
    if args.no_test:
        args.extra = [*args.extra, "--test_after_fit=false"]
    store = RESULTS / f"speakers_{args.name or args.task}.json"
    runs: list[dict[str, Any]] = json.loads(store.read_text())["runs"] if store.exists() else []
    if not args.table_only:
        log_dir = ROOT / "runs" / "speakers"
        log_dir.mkdir(parents=True, exist_ok=True)
        for candidate in args.candidates:  # candidate by candidate: each fold of one before the next
            for fold in args.folds:
                val_speaker = args.validation == "speaker"
                cmd = " ".join(command(args.task, candidate, fold, args.extra, val_speaker))
                if any(r["command"] == cmd for r in runs):
                    continue
                result = run(args.task, candidate, fold, args.extra, log_dir, val_speaker)
                runs.append(result)
                store.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
                tested = "" if result["test"] is None else f" test {result['test']:.4f}"
                seconds = result["seconds"]
                print(f"{candidate} fold {fold}: val {result['val']:.4f}{tested} ({seconds:.0f} s)", flush=True)
    print(table(runs))


if __name__ == "__main__":
    main()
