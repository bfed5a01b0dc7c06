"""The connected-digits mask benchmark on generated recordings: decoding, streaming, the cost worker and
the rendered section."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch

from studies._runner import Study
from studies._runner.cli import _value, measure
from studies._runner.render import splice
from studies._runner.stats import ratio_bootstrap
from studies.speech_strings import measure as bench
from studies.speech_strings import page as rendering

SPEAKERS = ("ann", "bob")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data")
    recordings = root / "fsdd" / "recordings"
    recordings.mkdir(parents=True)
    g = np.random.default_rng(0)
    for speaker in SPEAKERS:
        for digit in range(10):
            for index in range(6):  # takes 0-4 are the test takes
                n = 1200 + 40 * digit + 10 * index
                t = np.arange(n) / 8000
                clip = 0.3 * np.sin(2 * np.pi * (200 + 60 * digit) * t) + 0.01 * g.standard_normal(n)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip.astype(np.float32), 8000)
    return root


def test_streamed_digits_equal_the_full_greedy_decode(root: Path) -> None:
    torch.manual_seed(0)
    task = bench.build_task("Chunk(4, 4)")
    strings = bench.test_strings(None, 3, str(root))
    out = bench.stream_eval(task, strings, 3, piece=500)
    assert out["strings"] == 3 and out["equal_to_full"] == 3 and out["step_frames"] == 4
    assert out["digits"] == sum(len(strings[i][1]) for i in range(3))
    assert 0.0 <= out["der"]
    scores = bench.decode_der(task, bench.test_strings(2, 4, str(root)), batch_size=3)
    assert scores["digits"] == 8 and scores["strings"] == 4 and 0.0 <= scores["string_acc"] <= 1.0
    rescored = bench.decode_der(task, bench.test_strings(2, 4, str(root)), batch_size=3, decoding="rescore")
    assert rescored["digits"] == 8 and rescored["der"] >= 0.0


def test_edits_and_names() -> None:
    assert bench._edits([1, 2, 3], [1, 3]) == 1 and bench._edits([], [4, 4]) == 2
    names = _value(["Full"], "Full,Chunk(8, 2), Window(16, 4)")  # the runner's reading of a list option
    assert names == ["Full", "Chunk(8, 2)", "Window(16, 4)"]
    assert repr(bench.build_task("Window(16, 4)").adapter.mask) == "Window(left=16, right=4)"


def test_cost_part_runs_each_mask_in_its_own_process(root: Path) -> None:
    opts = argparse.Namespace(cost_lengths=[1], batch=2, steps=1, root=str(root), cost_masks=["Full", "Chunk(8, 2)"])
    part = bench.cost(opts)
    assert [r["mask"] for r in part["rows"]] == ["Chunk(8, 2)", "Full"]  # odd lengths run the masks reversed
    for r in part["rows"]:
        assert r["frames"] > 0 and r["step_s"] > 0 and r["peak_mb"] >= 0 and r["digits"] == 1


def _der(length: int, greedy: float, rescore: float, digits: int = 1000) -> dict:
    return {"length": length, "strings": digits // length, "digits": digits, "der": greedy, "string_acc": 0.5,
            "recipe": {"decoding": "rescore", "strings": digits // length, "digits": digits, "der": rescore,
                       "string_acc": 0.6}}


def _store() -> dict:
    run = {"command": "test", "machine": "test", "minutes": 0.0}
    rows = [
        {"mask": m, "digits": n, "batch": 16, "frames": 20 * n, "step_s": t, "peak_mb": mb, "epoch_min": t * 4}
        for m, n, t, mb in [("Full", 1, 0.1, 10.0), ("Chunk(8, 2)", 1, 0.15, 10.0), ("Full", 5, 0.5, 60.0),
                            ("Chunk(8, 2)", 5, 0.52, 40.0), ("Full", 20, 3.0, 600.0), ("Chunk(8, 2)", 20, 1.5, 200.0)]
    ]
    stream = {"strings": 2, "digits": 7, "der": 0.0, "equal_to_full": 2, "step_frames": 8, "matched": 7,
              "emitted_at_flush": 1, "latency_mean_ms": 50.0, "latency_p50_ms": 40.0, "latency_p95_ms": 200.0,
              "latency_max_ms": 260.0, "latency_min_ms": -100.0}
    model = {"num_train": 4000, "epochs": 10, "decoding": "rescore", "best_epoch": 9.0, "seconds": 600.0,
             "test_der": 0.05, "test_string_acc": 0.8, "stream": stream, "run": run,
             "der": [_der(1, 0.04, 0.02), _der(5, 0.05, 0.03), _der(20, 0.06, 0.04)]}
    return {"cost": {"rows": rows, "steps_per_epoch": 250, "steps": 5, "run": run}, "models": {"Chunk(8, 2)": model},
            "reference": {"mask": "Chunk(8, 2)", "budget": "the recipe's run", "stream": {**stream, "der": 0.01}}}


def test_section_states_where_truncation_pays_and_replaces_itself() -> None:
    store = _store()
    rows = store["cost"]["rows"]
    assert rendering.crossover(rows, "step_s", "Chunk(8, 2)") == 20  # 0.52 s at 5 digits is not below Full's
    assert rendering.crossover(rows, "peak_mb", "Chunk(8, 2)") == 5
    text = rendering.render_section(store)
    assert "step time is at least 10% below Full's from 20 digits (400 frames) on" in text
    assert "| Chunk(8, 2) | 320 | 50 | 40 | 200 | 260 | 1 | 0.00 | 2/2 |" in text
    assert "| 5 | 100 | Chunk(8, 2) | 2.08 | 1.04 | 40 | 0.67 |" in text
    assert "| Chunk(8, 2) | 4,000 strings x 10 epochs | 1 | rescore | 2.00 ± 0.44 | 3.00 ± 0.54 | 4.00 ± 0.62 |" in text
    assert "(each 4,000 strings x 10 epochs)" in text and "reduced budget" not in text
    assert "Chunk(8, 2) trained here (4,000 strings x 10 epochs) and the recipe's own run (streamed DER 0.0% vs " \
           "1.0%): mean latency 50 vs 50 ms" in text
    assert "DER of Full: not measured yet" in text
    assert "One seed per mask" in text
    page = "# Speech\n\nintro\n"
    body = rendering.render_section(store).splitlines()
    once = splice(page, "speech_strings:section", body, "note")
    assert once.startswith(page) and once.count("<!-- speech_strings:section:start") == 1
    again = once + "\n## After\n"
    assert splice(again, "speech_strings:section", body, "note") == again
    assert set(rendering.figures(store)) == {"speech_strings_cost"}


def test_der_crossover_needs_ten_percent_and_two_standard_errors() -> None:
    store = _store()
    full = {**store["models"]["Chunk(8, 2)"], "der": [_der(1, 0.02, 0.01), _der(5, 0.06, 0.031), _der(20, 0.12, 0.08)]}
    store["models"]["Full"] = full
    rows = rendering._der_rows(store["models"], None)
    # greedy: 1 digit worse than Full (0.04 vs 0.02, 2.6 SE), 5 digits 17% below but by 1.3 SE, 20 digits 6.9 SE below
    assert rendering.crossover(rows, "der", "Chunk(8, 2)", se="se") == 20
    assert rendering.crossover(rows, "der", "Chunk(8, 2)") == 5  # without the standard errors
    text = rendering.render_section(store)
    assert ("greedy DER is at least 10% and by 2 standard errors below Full's from 20 digits on (above Full's beyond "
            "2 standard errors at 1 digit); rescore DER is at least 10% and by 2 standard errors below Full's from "
            "20 digits on.") in text  # rescore at 1 digit: 0.02 vs 0.01 is 1.8 standard errors
    assert "DER of Full: not measured yet" not in text
    store["models"]["Chunk(4, 4)"] = store["models"]["Chunk(8, 2)"]  # trained, but not a mask of the cost part
    assert "- **Chunk(4, 4)**: step time and memory not measured (not a mask of the cost part); greedy DER is at " \
        "least 10% and by 2 standard errors below Full's from 20 digits on" in rendering.render_section(store)
    store["models"]["Full"] = {**full, "num_train": 2000}
    assert "DER not compared (Chunk(8, 2) trained 4,000 strings x 10 epochs, Full 2,000 strings x 10 epochs)" in \
        rendering.render_section(store)


def test_errors_are_charged_to_the_reference_digits() -> None:
    g = np.random.default_rng(1)
    for _ in range(300):
        ref = list(g.integers(0, 4, g.integers(0, 7)))
        hyp = list(g.integers(0, 4, g.integers(0, 7)))
        errors = bench.aligned_errors(ref, hyp)
        assert len(errors) == len(ref) and sum(errors) == (bench._edits(ref, hyp) if ref else 0)
    assert bench.aligned_errors([1, 2, 3], [1, 3]) == [0, 1, 0]  # the deleted 2
    assert bench.aligned_errors([1, 2], [5, 1, 2]) == [1, 0]  # an insertion before the first digit
    assert bench.aligned_errors([1, 2], [1, 2, 7]) == [0, 1]  # an insertion after the last


def test_decoding_keeps_each_recordings_errors(root: Path) -> None:
    torch.manual_seed(0)
    task = bench.build_task("Chunk(4, 4)")
    strings = bench.test_strings(3, 5, str(root))
    out = bench.decode_der(task, strings)
    per = out["per_take"]
    assert sum(per["digits"]) == out["digits"] == 15 and len(per["ids"]) == len(set(per["ids"]))
    assert abs(sum(per["errors"]) / out["digits"] - out["der"]) < 1e-12
    assert set(per["ids"]) == {int(t) for p in strings.plans for t in p.takes}


def test_the_recording_bootstrap() -> None:
    a = {"ids": list(range(40)), "errors": [1] * 40, "digits": [10] * 40}
    worse = {**a, "errors": [3] * 40}
    noisy = {**a, "errors": [0, 2] * 20}
    diff, lo, hi = ratio_bootstrap([a], [worse])
    assert abs(diff + 0.2) < 1e-12 and lo == pytest.approx(-0.2) and hi == pytest.approx(-0.2)
    diff, lo, hi = ratio_bootstrap([a], [noisy])  # the same mean, spread over recordings
    assert diff == 0 and lo < 0 < hi
    # two seeds: each recording's errors averaged over them; recordings only one run saw are left out
    diff, _, _ = ratio_bootstrap([a, worse], [a])
    assert abs(diff - 0.1) < 1e-12
    partial = {"ids": [0, 1], "errors": [5, 5], "digits": [10, 10]}
    assert ratio_bootstrap([partial], [a])[0] == pytest.approx(0.4)


def test_seeds_are_stored_apart_and_averaged() -> None:
    assert bench.model_key("Chunk(8, 2)", 0) == "Chunk(8, 2)" and bench.mask_of(bench.model_key("Full", 2)) == "Full"
    store = _store()
    base = store["models"]["Chunk(8, 2)"]
    one = {"ids": [0, 1, 2, 3], "errors": [1, 1, 1, 1], "digits": [25, 25, 25, 25]}
    full_runs = {"ids": [0, 1, 2, 3], "errors": [4, 5, 4, 5], "digits": [25, 25, 25, 25]}

    def model(der: float, per: dict) -> dict:
        return {**base, "der": [{"length": 20, "strings": 5, "digits": 100, "der": der, "string_acc": 0.5,
                                 "per_take": per}]}

    store["models"] = {"Chunk(8, 2)": model(0.04, one), "Chunk(8, 2) (seed 1)": model(0.04, one),
                       "Full": model(0.18, full_runs), "Full (seed 1)": model(0.18, full_runs)}
    rows = {r["mask"]: r for r in rendering._der_rows(store["models"], None)}
    assert rows["Chunk(8, 2)"]["seeds"] == 2 and rows["Chunk(8, 2)"]["se"] == 0 and len(rows["Full"]["runs"]) == 2
    assert rendering.crossover(list(rows.values()), "der", "Chunk(8, 2)", se="se") == 20
    text = rendering.render_section(store)
    assert "| Chunk(8, 2) | 4,000 strings x 10 epochs | 2 | greedy | 4.00 ± 0.00 |" in text
    assert text.count("| Chunk(8, 2) | 320 |") == 1  # the latency table: one row per mask, both seeds streamed
    assert "2 training seeds per mask (a row each" in text and "One seed per mask" not in text
    assert "greedy DER is at least 10% and by its 95% recording-bootstrap interval below Full's from 20 digits" in text


def test_train_part_on_generated_recordings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The documented ``measure train`` command with a tiny budget: the recipe's data options (not its data
    root or download switch, which are the run's), a model stored under its seed's key with its DER per
    recording."""
    import json

    root = tmp_path / "data"
    recordings = root / "fsdd" / "recordings"
    recordings.mkdir(parents=True)
    for speaker in SPEAKERS:
        for digit in range(10):
            for index in range(10):  # takes 0-4 test, 5-9 train and validation
                t = np.arange(1200 + 40 * digit) / 8000
                clip = 0.3 * np.sin(2 * np.pi * (200 + 60 * digit + index) * t)
                soundfile.write(recordings / f"{digit}_{speaker}_{index}.wav", clip.astype(np.float32), 8000)

    monkeypatch.setattr(bench, "STORE", tmp_path / "store.json")
    monkeypatch.setattr(bench, "CKPT_DIR", tmp_path / "ckpt")
    study = Study.load("speech_strings", tmp_path / "store.json")
    measure(study, "train", ["masks=Chunk(4, 4)", "seed=1", "num_train=8", "epochs=1", "lengths=1",
                             "digits_per_length=4", "stream_strings=2", f"root={root}"], "test")
    models = bench.load_store()["models"]
    packed = json.loads((tmp_path / "store.json").read_text())["detail"]
    assert "ids" not in packed["models"]["Chunk(4, 4) (seed 1)"]["der"][0]["per_take"]  # kept once, in "takes"
    assert bench.unpack(packed) == bench.load_store() and bench.pack(bench.load_store()) == packed
    (model,) = models.values()
    assert list(models) == ["Chunk(4, 4) (seed 1)"] and model["seed"] == 1 and model["num_train"] == 8
    assert model["der"][0]["length"] == 1 and len(model["der"][0]["per_take"]["ids"]) > 0
    assert list((tmp_path / "ckpt").glob("*.ckpt"))
