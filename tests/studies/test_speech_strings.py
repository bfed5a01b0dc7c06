"""The connected-digits mask study on generated recordings: decoding, streaming, the cost worker and the rendered
section."""

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
from studies._runner.template import pages
from studies.speech_strings import context, pack, unpack
from studies.speech_strings import measure as bench

SPEAKERS = ("ann", "bob")
PAGE = Path(bench.__file__).with_name("page.md")


def render_section(store: dict) -> str:
    return "\n".join(pages(PAGE, store, context(store))["docs/recipes/speech.md#section"]) + "\n"


def _edits(ref: list[int], hyp: list[int]) -> int:
    """The edit distance, by the textbook recurrence (an oracle for the alignment's errors)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i]
        for j, h in enumerate(hyp, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h)))
        prev = cur
    return prev[-1]


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
    assert _edits([1, 2, 3], [1, 3]) == 1 and _edits([], [4, 4]) == 2
    names = _value(["Full"], "Full,Chunk(8, 2), Window(16, 4)")  # the runner's reading of a list option
    assert names == ["Full", "Chunk(8, 2)", "Window(16, 4)"]
    assert repr(bench.build_task("Window(16, 4)").adapter.mask) == "Window(left=16, right=4)"


def test_cost_part_runs_each_mask_in_its_own_process(root: Path) -> None:
    from benchmarks import mask_costs

    opts = argparse.Namespace(cost_lengths=[1], batch=2, steps=1, root=str(root), cost_masks=["Full", "Chunk(8, 2)"],
                              num_train=4000)
    part = mask_costs.cost(opts)
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


def test_section_shows_cost_latency_and_der_and_replaces_itself() -> None:
    from benchmarks import mask_costs

    store = _store()
    text = render_section(store)
    assert "| Chunk(8, 2) | 320 | 50 | 40 | 200 | 260 | 1 | 0.00 | 2/2 |" in text
    assert "| Chunk(8, 2), the recipe's run | 320 | 50 | 40 | 200 | 260 | 1 | 1.00 | 2/2 |" in text
    assert "| 5 | 100 | Chunk(8, 2) | 2.08 | 1.04 | 40 | 0.67 |" in text
    assert "| 20 | 400 | Chunk(8, 2) | 6.00 | 0.50 | 200 | 0.33 |" in text  # half Full's time from 20 digits
    assert "| Chunk(8, 2) | 1 | rescore | 2.00 | 3.00 | 4.00 |" in text  # one seed: its DER, no spread
    assert "| Chunk(8, 2) | greedy | — | — | — |" in text  # no Full model: no difference to show
    assert "| Chunk(8, 2) | 4,000 strings x 10 epochs | the study's Trainer | rescore | 9 |" in text
    page = "# Speech\n\nintro\n"
    body = render_section(store).splitlines()
    once = splice(page, "speech_strings:section", body, "note")
    assert once.startswith(page) and once.count("<!-- speech_strings:section:start") == 1
    again = once + "\n## After\n"
    assert splice(again, "speech_strings:section", body, "note") == again
    assert set(mask_costs.figure(store)) == {"speech_strings_cost"}
    del store["cost"]
    assert "Step time and memory: not measured yet (`python -m studies speech_strings measure cost`)." in \
        render_section(store)


def test_der_against_full_by_the_recording_bootstrap() -> None:
    store = _store()
    one = {"ids": list(range(40)), "errors": [1] * 40, "digits": [25] * 40}
    worse = {**one, "errors": [3] * 40}
    model = store["models"]["Chunk(8, 2)"]
    store["models"] = {"Chunk(8, 2)": {**model, "der": [{**_der(20, 0.04, 0.02), "per_take": one}]},
                       "Full": {**model, "der": [{**_der(20, 0.12, 0.02), "per_take": worse}]}}
    text = render_section(store)
    assert "| Chunk(8, 2) | greedy | -8.00 [-8.00, -8.00] |" in text  # every recording: 2 errors fewer in 25
    assert "| Chunk(8, 2) | rescore | — |" in text  # the rescored decodings kept no errors per recording
    assert "| Full | 1 | greedy | 12.00 |" in text


def test_errors_are_charged_to_the_reference_digits() -> None:
    g = np.random.default_rng(1)
    for _ in range(300):
        ref = list(g.integers(0, 4, g.integers(0, 7)))
        hyp = list(g.integers(0, 4, g.integers(0, 7)))
        errors = bench.aligned_errors(ref, hyp)
        assert len(errors) == len(ref) and sum(errors) == (_edits(ref, hyp) if ref else 0)
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
    store = _store()
    base = store["models"]["Chunk(8, 2)"]
    one = {"ids": [0, 1, 2, 3], "errors": [1, 1, 1, 1], "digits": [25, 25, 25, 25]}
    full_runs = {"ids": [0, 1, 2, 3], "errors": [4, 5, 4, 5], "digits": [25, 25, 25, 25]}

    def model(der: float, per: dict) -> dict:
        return {**base, "der": [{"length": 20, "strings": 5, "digits": 100, "der": der, "string_acc": 0.5,
                                 "per_take": per}]}

    store["models"] = {"Chunk(8, 2)": model(0.04, one), "Chunk(8, 2) (seed 1)": model(0.04, one),
                       "Full": model(0.18, full_runs), "Full (seed 1)": model(0.18, full_runs)}
    rows = {r["mask"]: r for r in context(store)["der"]}
    assert rows["Chunk(8, 2)"]["seeds"] == 2 and rows["Chunk(8, 2)"]["der"] == ["4.00 ± 0.00"]
    text = render_section(store)
    assert "| Chunk(8, 2) | 2 | greedy | 4.00 ± 0.00 |" in text
    assert text.count("| Chunk(8, 2) | 320 |") == 1  # the latency table: one row per mask, both seeds streamed
    assert "| Chunk(8, 2) (seed 1) | 4,000 strings x 10 epochs |" in text  # the models table: a row per seed
    diff = rows["Chunk(8, 2)"]["vs_full"][0]  # 14 points fewer errors, every recording's interval below 0
    assert diff.startswith("-14.00 [-16.00, ") and diff.endswith(", -12.00]")


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

    monkeypatch.setattr(bench, "CKPT_DIR", tmp_path / "ckpt")
    study = Study.load("speech_strings", tmp_path / "store.json")
    measure(study, "train", ["masks=Chunk(4, 4)", "seed=1", "num_train=8", "epochs=1", "lengths=1",
                             "digits_per_length=4", "stream_strings=2", f"root={root}"], "test")
    packed = json.loads((tmp_path / "store.json").read_text())["detail"]
    models = unpack(packed)["models"]
    assert "ids" not in packed["models"]["Chunk(4, 4) (seed 1)"]["der"][0]["per_take"]  # kept once, in "takes"
    assert pack(unpack(packed)) == packed
    (model,) = models.values()
    assert list(models) == ["Chunk(4, 4) (seed 1)"] and model["seed"] == 1 and model["num_train"] == 8
    assert model["der"][0]["length"] == 1 and len(model["der"][0]["per_take"]["ids"]) > 0
    assert list((tmp_path / "ckpt").glob("*.ckpt"))
