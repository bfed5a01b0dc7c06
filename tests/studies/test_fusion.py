"""studies.fusion.conditions: the paired bootstrap on toy tables, the late ensemble's rule with a missing
modality, the conditions on generated pairs (missing = the present flag), the run commands (no test number
for any run), and the targets, table and figure rendered from a stored (here synthetic) result."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from studies._runner import Study
from studies._runner.cli import measure
from studies._runner.stats import bootstrap_difference
from studies.fusion import conditions as fc


def test_bootstrap_of_a_known_difference() -> None:
    rng = np.random.default_rng(0)
    a = rng.random(1000) < 0.9
    b = a.copy()
    b[:100] = ~b[:100]  # the second model differs on 100 pairs
    r = bootstrap_difference([a], [b], [0], resamples=1000)
    assert r["diff"] == pytest.approx(100 * (a.mean() - b.mean()))
    assert r["low"] < r["diff"] < r["high"]
    same = bootstrap_difference([a], [a], [0], resamples=200)
    assert same == {"diff": 0.0, "low": 0.0, "high": 0.0, "p_le_0": 1.0}
    # a clear gain: the interval excludes 0
    worse = a & (rng.random(1000) < 0.8)
    assert bootstrap_difference([a], [worse], [0], resamples=500)["low"] > 0


def test_bootstrap_pairs_the_seeds_and_resamples_folds_apart() -> None:
    rng = np.random.default_rng(1)
    seeds_a = [rng.random(400) < 0.8 for _ in range(3)]
    seeds_b = [x.copy() for x in seeds_a]
    # a mean over replicates: each replicate's difference counts once
    seeds_b[0][:40] = False
    r = bootstrap_difference(seeds_a, seeds_b, [0, 0, 0], resamples=500)
    expected = np.mean([100 * (x.mean() - y.mean()) for x, y in zip(seeds_a, seeds_b)])
    assert r["diff"] == pytest.approx(expected, abs=0.01)
    folds = bootstrap_difference([seeds_a[0], seeds_a[1][:300]], [seeds_b[0], seeds_b[1][:300]], [0, 1],
                                    resamples=300)
    assert folds["low"] <= folds["diff"] <= folds["high"]
    with pytest.raises(ValueError, match="same items"):
        bootstrap_difference([seeds_a[0], seeds_a[1][:300]], [seeds_b[0], seeds_b[1][:300]], [0, 0])
    with pytest.raises(ValueError, match="one group per replicate"):
        bootstrap_difference(seeds_a, seeds_b, [0])
    again = bootstrap_difference(seeds_a, seeds_b, [0, 0, 0], resamples=500)
    assert again == r  # a fixed generator: the same interval every time


def test_late_ensemble_averages_and_falls_back_to_the_present_modality() -> None:
    audio = np.array([[0.7, 0.3], [0.1, 0.9]])
    image = np.array([[0.2, 0.8], [0.3, 0.7]])
    np.testing.assert_allclose(fc.late_ensemble(audio, image), [[0.45, 0.55], [0.2, 0.8]])
    np.testing.assert_allclose(fc.late_ensemble(audio, None), audio)
    np.testing.assert_allclose(fc.late_ensemble(None, image), image)
    with pytest.raises(ValueError, match="at least one"):
        fc.late_ensemble(None, None)


def test_bits_round_trip() -> None:
    correct = np.array([True, False, True, True])
    assert fc.bits(correct) == "1011" and fc.unbits("1011").tolist() == correct.tolist()


def test_commands_never_test_and_follow_the_choice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sel = fc.fit_command("sel_robust_late")
    configs = "--config=studies/fusion/configs/robust"
    assert sel[:3] == ["recipes/multimodal_digits.py", "fit", f"{configs}_late.yaml"]
    assert "--test_after_fit=false" in sel
    assert f"--data.val_speakers=[{fc.VAL_SPEAKER}]" in sel and "--seed_everything=0" in sel
    assert fc.fit_command("sel_default")[:3] == ["studies/fusion/legacy_recipe.py", "fit", "--seed_everything=0"]
    assert f"{configs}_bottleneck.yaml" in fc.fit_command("sel_robust_bottleneck")
    audio = fc.fit_command("audio_lucas")
    assert "--data.test_speakers=[lucas]" in audio and f"{configs}_audio.yaml" in audio
    assert all("--test_after_fit=false" in fc.fit_command(name) for name in fc.RUNS if not name.startswith("fused"))
    monkeypatch.setattr(fc, "SELECTION", tmp_path / "selection.json")
    with pytest.raises(FileNotFoundError, match="select first"):
        fc.fit_command("fused_s1")
    (tmp_path / "selection.json").write_text(json.dumps({"choice": "robust_bottleneck"}))
    fused = fc.fit_command("fused_s1")
    assert f"{configs}_bottleneck.yaml" in fused
    assert "--seed_everything=1" in fused and "--test_after_fit=false" in fused
    gate = fc.fit_command("sel_robust_gate")
    assert f"{configs}_gate.yaml" in gate and f"--data.val_speakers=[{fc.VAL_SPEAKER}]" in gate
    assert f"{configs}_conflict_light.yaml" in fc.fit_command("sel_robust_conflict_light")
    chosen = fc.fit_command("sel_robust_conflict")  # the chosen model: the recipe's default config
    assert chosen[:3] == ["recipes/multimodal_digits.py", "fit", "--seed_everything=0"]
    # every run: 6 selection runs, 3 seeds of fused/audio/image, 5 folds of fused/audio
    assert len(fc.RUNS) == 6 + 9 + 10
    assert set(fc.BOTH_PRESENT) == set(fc.CONDITIONS) - {"audio missing", "image missing"} | {fc.HELD_OUT}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from _recipes import write_fsdd, write_mnist, write_speech_commands

    root = tmp_path_factory.mktemp("avdigits")
    write_fsdd(root, speakers=("ann", "bob", "theo"), takes=8)
    write_mnist(root)
    write_speech_commands(root, speakers=6, silence=0)  # the gate voices: 10 digits x 6 speakers
    return root


def test_condition_sets_on_generated_pairs(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fc, "TEST_PAIRS", {"own": 3, "speaker": 2})
    clean = fc.condition_set("test", {}, {}, str(root))
    assert len(clean) == 3 * 150  # 3 pairs per test recording
    missing = fc.condition_set("test", fc.CONDITIONS["audio missing"], {}, str(root))
    item = missing[5]
    assert not item["audio_present"] and item["image_present"] and item["waveform"].numel() == 0
    assert item["label"] == clean[5]["label"]
    val = fc.condition_set("val", fc.CONDITIONS["image missing"], {"val_speakers": ["theo"]}, str(root))
    assert all(not val[i]["image_present"] and val[i]["audio_present"] for i in range(len(val)))
    assert {p.name.split("_")[1] for p in val.clips.paths} == {"theo"}  # the validation speaker's takes
    fold = fc.condition_set("test", {}, {"test_speakers": ["bob"]}, str(root))
    assert len(fold) == 2 * 80 and {p.name.split("_")[1] for p in fold.clips.paths} == {"bob"}
    noisy = fc.condition_set("test", fc.CONDITIONS["both corrupted"], {}, str(root))
    assert not np.array_equal(noisy[0]["waveform"].numpy(), clean[0]["waveform"].numpy())
    assert int((noisy[0]["image"] == 0).sum()) >= 14 * 14
    unfamiliar = fc.condition_set("val", fc.VALIDATION_CONDITIONS[fc.UNFAMILIAR], {"val_speakers": ["theo"]}, str(root))
    assert len(unfamiliar) == 10 * 3  # the held-out half of the 6 gate speakers, ten digits each
    assert all("speech_commands" in str(p) for p in unfamiliar.clips.paths)
    with pytest.raises(ValueError, match="validation condition"):
        fc.condition_set("test", fc.VALIDATION_CONDITIONS[fc.UNFAMILIAR], {}, str(root))


def _store(fused_gain: float = 0.0) -> dict:
    """A synthetic stored result: 3 seeds on 200 pairs, 5 folds on 100 pairs."""
    rng = np.random.default_rng(0)
    accuracy = {"fused": 0.97 + fused_gain, "audio": 0.9, "image": 0.95, "ensemble": 0.96}
    cells: dict = {m: {} for m in fc.MODELS}
    for cond in [*fc.CONDITIONS, fc.HELD_OUT]:
        reps, n = (5, 100) if cond == fc.HELD_OUT else (3, 200)
        for m in fc.MODELS:
            if (m, cond) in (("audio", "audio missing"), ("image", "image missing")):
                continue
            correct = [fc.bits(rng.random(n) < min(accuracy[m], 1.0)) for _ in range(reps)]
            alpha = [[0.6, 0.4]] * reps if m == "fused" else []
            cells[m][cond] = {"replicates": [f"{m}{r}" for r in range(reps)], "correct": correct, "alpha": alpha}
    store = {"test_seed": fc.TEST_SEED, "test_pairs": fc.TEST_PAIRS, "conditions": fc.CONDITIONS,
             "held_out": fc.HELD_OUT, "selection": {"choice": "robust_late"}, "cells": cells,
             "runs": {"fused_s0": {"seconds": 600.0}, "audio_s0": {"seconds": 950.0}}}
    store["summary"] = fc.summarize(store)
    return store


def test_summary_targets_and_render(tmp_path: Path) -> None:
    store = _store()
    s = store["summary"]
    assert set(s["accuracy"]["audio"]) == set(fc.CONDITIONS) - {"audio missing"} | {fc.HELD_OUT}
    assert "audio" not in s["fused_minus"]["audio missing"] and "ensemble" in s["fused_minus"]["audio missing"]
    clean = s["accuracy"]["fused"]["clean"]
    values = [100 * fc.unbits(c).mean() for c in store["cells"]["fused"]["clean"]["correct"]]
    assert clean["mean"] == pytest.approx(np.mean(values), abs=0.01)
    assert clean["std"] == pytest.approx(np.std(values, ddof=1), abs=0.01)
    t = s["targets"]
    assert t["training_minutes"] == {"max": 15.8, "met": False}
    assert t["clean"]["met"] == (clean["mean"] >= 99.5)
    nw = t["never_worse"]["image missing"]
    assert nw["best_peer"] in ("audio", "ensemble")
    assert nw["margin"] == pytest.approx(s["accuracy"]["fused"]["image missing"]["mean"]
                                         - s["accuracy"][nw["best_peer"]]["image missing"]["mean"], abs=0.011)
    section = fc.render_section(store)
    assert section.startswith(fc.START) and section.rstrip().endswith(fc.END)
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(fc.CONDITIONS) + 1  # the header and one row per condition
    assert rows[-2].startswith("| image missing |") and "| — |" in rows[-2]  # image only has no prediction
    assert "fusion_conditions.png" in section and "never worse" in section
    page = "# Title\n\nText.\n"
    once = fc.render_page(page, store)
    assert once.count(fc.START) == 1 and fc.render_page(once, _store(0.02)).count(fc.START) == 1
    assert fc.render_page(once, store) == once  # rendering again changes nothing
    fig = fc.figure(store)
    assert len(fig.axes[0].lines) == len(fc.MODELS)


def test_train_select_and_evaluate_end_to_end(root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny runs on generated data: every run trains without a test, select reads validation pairs only and
    stores a choice, evaluate classifies every condition and renders the section."""
    from _recipes import fork_python_scripts

    fork_python_scripts(monkeypatch)  # each run a process of its own, without the interpreter's start each time
    repo = fc.ROOT
    (tmp_path / "recipes").symlink_to(repo / "recipes")
    (tmp_path / "studies").symlink_to(repo / "studies")
    (tmp_path / "docs" / "recipes").mkdir(parents=True)
    (tmp_path / "docs" / "recipes" / "multimodal.md").write_text("# Multimodal\n")
    monkeypatch.setattr(fc, "ROOT", tmp_path)
    monkeypatch.setattr(fc, "SELECTION", tmp_path / "selection.json")
    monkeypatch.setattr(fc, "STORE", tmp_path / "store.json")
    monkeypatch.setattr(fc, "CELLS", tmp_path / "cells")
    monkeypatch.setattr(fc, "PAGE", tmp_path / "docs" / "recipes" / "multimodal.md")
    monkeypatch.setattr(fc, "SEEDS", (0,))
    monkeypatch.setattr(fc, "SPEAKERS", ("bob",))
    monkeypatch.setattr(fc, "VAL_SPEAKER", "theo")
    monkeypatch.setattr(fc, "RUNS", fc._runs())
    monkeypatch.setattr(fc, "TEST_PAIRS", {"own": 2, "speaker": 1})
    monkeypatch.setattr(fc, "BOOTSTRAP", 50)
    monkeypatch.setenv("ATTNMM_DATA", str(root))
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    tiny = ["--trainer.max_epochs=1", "--trainer.limit_train_batches=2", "--data.batch_size=8",
            "--trainer.callbacks=[]"]
    runs = tmp_path / "runs"
    for name in fc.RUNS:
        if name.startswith("sel_"):
            record = fc.train(name, runs, tiny)
            assert set(record["validation"]) == {"val_acc", "val_loss"}
    fc.SELECTION.write_text(json.dumps({"choice": "robust_late", "scores": "the second protocol's"}))
    selection = fc.select(runs_dir=runs)
    kept = json.loads((tmp_path / "fusion_selection_protocol2.json").read_text())
    assert kept == {"choice": "robust_late", "scores": "the second protocol's"}  # the earlier record, as it was
    assert selection["choice"] in fc.CANDIDATES and selection["split"] == "val"
    assert set(selection["scores"]["robust_late"]) == {*fc.CONDITIONS, fc.UNFAMILIAR, "mean"}
    assert selection["protocol"] == fc.PROTOCOL and len(selection["scores"]) == len(fc.CANDIDATES)
    # what the chosen model's head averages, chosen on the same validation conditions (the robust model here,
    # whichever tiny run won)
    fc.SELECTION.write_text(json.dumps({**json.loads(fc.SELECTION.read_text()), "choice": "robust_late"}))
    measure(Study.load("fusion"), "select-combine", [f"runs_dir={runs}"], "test")  # the documented command
    combine = json.loads(fc.SELECTION.read_text())["combine"]
    assert combine["choice"] in fc.COMBINES and combine["split"] == "val" and combine["run"] == "sel_robust_late"
    assert set(combine["scores"]) == set(fc.COMBINES)
    assert fc.load_model(tmp_path / runs / "sel_robust_late", "average").head.combine == "average"
    assert fc.chosen_combine() == combine["choice"] and json.loads(fc.SELECTION.read_text())["choice"] == "robust_late"
    for name in fc.RUNS:
        if not name.startswith("sel_"):
            fc.train(name, runs, tiny)
    # a run kept by evaluate-run is read from its cells at evaluate, its checkpoint gone (another session)
    measure(Study.load("fusion"), "evaluate-run", ["run=audio_s0", f"runs_dir={runs}"], "test")
    meta, kept = fc.load_cells("audio_s0")
    assert meta["name"] == "audio_s0" and meta["combine"] is None and "audio missing" not in kept
    assert kept["clean"]["probs"].shape == (2 * 150, 10) and kept["clean"]["probs"].dtype == np.float32
    import shutil

    shutil.rmtree(tmp_path / runs / "audio_s0")
    with pytest.raises(ValueError, match="takes a final run"):
        fc.evaluate_run("sel_default", runs_dir=runs)
    with pytest.raises(FileNotFoundError, match="run not trained yet: audio_s0"):
        fc.evaluate_run("audio_s0", runs_dir=runs)
    earlier = tmp_path / "draw1.json"
    monkeypatch.setattr(fc, "EARLIER", {1: earlier})
    (tmp_path / "store.json").write_text(json.dumps({"test_seed": 1, "cells": "the first draw's"}))
    measure(Study.load("fusion"), "evaluate", [f"runs_dir={runs}"], "test")
    assert json.loads(earlier.read_text()) == {"test_seed": 1, "cells": "the first draw's"}  # kept as it was
    store = fc.load_store(tmp_path / "store.json")
    assert store["test_seed"] == fc.TEST_SEED and store["combine"] == combine["choice"]
    cells = store["cells"]
    assert len(cells["fused"]["clean"]["correct"][0]) == 2 * 150  # 150 own-split test recordings x 2
    assert len(cells["fused"][fc.HELD_OUT]["correct"][0]) == 80  # bob's 80 takes x 1
    assert "image missing" not in cells["image"] and "audio missing" not in cells["audio"]
    assert cells["ensemble"]["audio missing"]["correct"] == cells["image"]["audio missing"]["correct"]
    kept_runs = sorted(p.stem for p in fc.cells_path("x").parent.iterdir())
    assert store["runs"]["audio_s0"] == meta["run"]
    assert kept_runs == [n for n in sorted(fc.RUNS) if not n.startswith("sel_")]  # every final run kept
    fused = fc.load_cells("fused_s0")[1]["clean"]
    assert fused["probs"].sum(1).tolist() == [1.0] * 300  # a fused run keeps its predictions (one-hot)
    page = (tmp_path / "docs" / "recipes" / "multimodal.md").read_text()
    assert fc.START in page and "| held-out speaker (exploratory) |" in page


def test_select_keeps_an_earlier_protocols_scores_for_runs_not_at_hand(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fc, "ROOT", tmp_path)
    monkeypatch.setattr(fc, "SELECTION", tmp_path / "selection.json")
    conditions = list(fc.VALIDATION_CONDITIONS)
    earlier = {c: {**{k: 80.0 for k in conditions}, "mean": 80.0 + i} for i, c in enumerate(fc.CANDIDATES)
               if c.startswith(("default", "robust_late", "robust_bottleneck", "robust_gate"))}
    combine = {"run": "sel_robust_gate", "choice": "logits", "scores": {}}
    record = {"protocol": fc.PROTOCOL - 1, "conditions": conditions, "scores": earlier, "choice": "robust_gate",
              "combine": combine}
    fc.SELECTION.write_text(json.dumps(record))
    new = [c for c in fc.CANDIDATES if c not in earlier]
    assert new == ["robust_conflict_light", "robust_conflict"]
    with pytest.raises(FileNotFoundError, match="sel_robust_conflict_light"):
        fc.select(runs_dir=Path("runs"))
    for c in new:
        (tmp_path / "runs" / f"sel_{c}").mkdir(parents=True)
        (tmp_path / "runs" / f"sel_{c}" / "run.json").write_text("{}")
    scored: list[list[str]] = []

    def fake(names, split, root, runs_dir, combine=None):
        scored.append(list(names))
        right = {"probs": np.eye(10)[[1, 2]], "labels": np.array([1, 2])}
        return {n: {c: right for c in conditions} for n in names}

    monkeypatch.setattr(fc, "_evaluate_runs", fake)
    chosen = fc.select(runs_dir=Path("runs"))
    assert scored == [["sel_robust_conflict_light", "sel_robust_conflict"]]  # only the runs at hand are scored
    assert chosen["scores"]["robust_gate"] == earlier["robust_gate"]
    assert chosen["scores"]["robust_conflict"]["mean"] == 100
    assert chosen["choice"] == "robust_conflict_light"  # a tie at 100: the earlier candidate
    assert chosen["stored"] == {c: f"protocol {fc.PROTOCOL - 1}" for c in earlier}
    kept = json.loads((tmp_path / f"fusion_selection_protocol{fc.PROTOCOL - 1}.json").read_text())
    assert kept == record  # the earlier record, as it was
    # a stored candidate chosen: its stored combine choice stands (its run is not at hand to score)
    fc.SELECTION.write_text(json.dumps({**chosen, "choice": "robust_gate"}))
    assert fc.select_combine(runs_dir=Path("runs")) == {**combine, "stored": f"protocol {fc.PROTOCOL - 1}"}
    # an earlier record of other conditions does not compare: nothing is kept from it
    assert fc.stored_scores(tmp_path / "absent.json")[0] == earlier  # the kept protocol file is found
    (tmp_path / f"fusion_selection_protocol{fc.PROTOCOL - 1}.json").write_text(
        json.dumps({**record, "conditions": conditions[:-1]}))
    assert fc.stored_scores(tmp_path / "absent.json") == ({}, None, None)
