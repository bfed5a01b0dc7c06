"""Unseen speakers, leave one speaker out: the candidates and commands of protocols 1-3 of the speakers
study (legacy: their runs were made by an earlier driver and are imported into ``store.json``).

For each of FSDD's five speakers (fold ``i``: test speaker ``SPEAKERS[i]``), the speech recipe was
trained on three speakers, its checkpoint chosen on the next speaker in the cyclic order
(``--data.val_speakers``, never trained on) and tested on the held-out one
(``--data.test_speakers``). Each candidate of :data:`CANDIDATES` (the adapter's options: SpecAugment
alone, + per-utterance normalisation, + speed perturbation and noise; and the model's of
:data:`MODEL_OPTIONS`: starting from the backbone pretrained on Speech Commands, frozen or not for the
first epochs) ran every fold, one ``fit`` at a time in a fresh process (one thread). Their stored runs
are in ``stores/speakers_*.json``; :func:`table` shows one of them. Every FSDD speaker has since been a
test speaker, so these protocols are not run again: the study's current protocol runs under
``python -m studies speakers select|test``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from studies._runner.stats import mean_std

ROOT = Path(__file__).resolve().parents[2]
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


def _mean_std(values: list[float]) -> str:
    return mean_std(values, digits=2) if values else "-"


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
