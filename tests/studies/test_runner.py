"""The study runner keeps a protocol: toy studies whose sets are lists of recordings by speaker."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from studies._runner import Items, ProtocolError, Store, Study, View, render
from studies._runner.cli import main
from studies._runner.render import readme_block

SPEAKERS = {"ann": ["ann_0", "ann_1"], "bob": ["bob_0", "bob_1"], "cy": ["cy_0"], "dee": ["dee_0", "dee_1"]}


def toy_module(calls: list[tuple[Any, ...]]) -> ModuleType:
    """A study over speakers' recordings whose score is a fixed function of candidate, seed and set."""
    m = ModuleType("toy")

    def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
        recs = [r for s in spec["speakers"] for r in SPEAKERS[s]]
        return Items.of(recs, speaker=spec["speakers"], recording=recs)

    def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
        calls.append((candidate["width"], seed, tuple(evaluate)))
        return {name: {"accuracy": candidate["width"] / 10 + seed / 100 + len(evaluate[name].payload) / 1000}
                for name in evaluate}

    m.resolve, m.run = resolve, run  # type: ignore[attr-defined]
    return m


def protocol(val: list[str], test: list[str], **extra: Any) -> dict[str, Any]:
    return {"question": "which width?", "sets": {"train": {"speakers": ["ann"]}, "val": {"speakers": val},
                                                 "test": {"speakers": test}},
            "train": "train", "validation": ["val"], "test": ["test"],
            "candidates": {"narrow": {"width": 1}, "wide": {"width": 2}},
            "seeds": {"select": [0, 1], "test": [0, 1, 2]}, "select": {"metric": "accuracy", "mode": "max"}, **extra}


def make(tmp_path: Path, proto: dict[str, Any], calls: list[tuple[Any, ...]] | None = None,
         store: Path | None = None) -> Study:
    folder = tmp_path / "toy"
    folder.mkdir(exist_ok=True)
    (folder / "protocol.json").write_text(json.dumps(proto))
    return Study(folder, toy_module([] if calls is None else calls), store)


def test_refuses_validation_sharing_one_speaker(tmp_path: Path) -> None:
    study = make(tmp_path, protocol(val=["bob", "cy"], test=["cy", "dee"]))
    with pytest.raises(ProtocolError, match=r"shares 1 speaker\(s\).*cy"):
        study.run("select", progress=False)
    assert study.store.records == []


def test_refuses_shared_recording_under_other_names(tmp_path: Path) -> None:
    """The check compares resolved items, not set names: two differently named sets with one recording."""
    proto = protocol(val=["bob"], test=["dee"])
    proto["sets"]["val"] = {"speakers": ["bob"]}
    proto["sets"]["held"] = {"speakers": ["bob"]}
    proto["test"] = ["test", "held"]
    with pytest.raises(ProtocolError, match="recording"):
        make(tmp_path, proto).check()


def test_selection_never_scores_a_test_set(tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]), calls)
    new = study.run("select", progress=False)
    assert len(new) == 4 and all(c[2] == ("val",) for c in calls)
    assert all(set(r["scores"]) == {"val"} for r in study.store.records)
    saved = json.loads((tmp_path / "toy" / "store.json").read_text())
    assert len(saved["records"]) == 4 and saved["scored"] == {}
    assert saved["records"][0]["command"].startswith("python -m studies") and "seconds" in saved["records"][0]


def test_selection_asking_for_a_test_number_raises(tmp_path: Path) -> None:
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]))

    def peeking(candidate: Any, seed: int, train: Any, evaluate: Any, budget: Any) -> Any:
        return {"val": {"accuracy": 0.5}, "test": {"accuracy": len(evaluate["test"].payload)}}

    study.module.run = peeking  # type: ignore[attr-defined]
    with pytest.raises(ProtocolError, match="may not score 'test' \\(a test set\\)"):
        study.run("select", progress=False)

    def returning(candidate: Any, seed: int, train: Any, evaluate: Any, budget: Any) -> Any:
        return {"val": {"accuracy": 0.5}, "test": {"accuracy": 0.9}}

    study.module.run = returning  # type: ignore[attr-defined]
    with pytest.raises(ProtocolError, match="may not score"):
        study.run("select", progress=False)
    assert study.store.records == []


def test_test_runs_the_selected_candidate_with_the_protocol_hash(tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]), calls)
    with pytest.raises(ProtocolError, match="selection runs are missing"):
        study.run("test", progress=False)
    study.run("select", progress=False)
    new = study.run("test", progress=False)
    assert [r["candidate"] for r in new] == ["wide"] * 3
    assert {r["protocol"] for r in new} == {study.protocol.hash}
    assert study.store.scored == {study.protocol.hash: {"recording": ["dee_0", "dee_1"], "speaker": ["dee"]}}


def test_selection_per_split_tests_each_splits_winner(tmp_path: Path) -> None:
    proto = protocol(val=["bob"], test=["dee"], test_candidates="selected per split")
    proto["sets"]["val2"], proto["sets"]["test2"] = {"speakers": ["cy"]}, {"speakers": ["ann"]}
    proto["splits"] = {"a": {"train": "train", "validation": ["val"], "test": ["test"]},
                       "b": {"train": "train", "validation": ["val2"], "test": ["test2"]}}
    study = make(tmp_path, proto)
    study.run("select", progress=False)
    for r in study.store.records:  # split b's narrow candidate wins there
        if r["split"] == "b" and r["candidate"] == "narrow":
            r["scores"]["val2"]["accuracy"] = 1.0
    assert study.selected("a") == ["wide"] and study.selected("b") == ["narrow"]
    new = study.run("test", progress=False)
    assert sorted({(r["split"], r["candidate"]) for r in new}) == [("a", "wide"), ("b", "narrow")]
    with pytest.raises(ProtocolError, match="test_candidates must be"):
        make(tmp_path, {**proto, "test_candidates": "the best"})


def test_second_protocol_on_a_scored_test_set_is_refused(tmp_path: Path) -> None:
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]))
    study.run("select", progress=False)
    study.run("test", progress=False)
    # a new candidate changes the protocol; testing again on dee is refused, before any run
    changed = protocol(val=["bob"], test=["dee"])
    changed["candidates"]["wider"] = {"width": 3}
    again = make(tmp_path, changed)
    assert again.protocol.hash != study.protocol.hash
    for kind in ("select", "test"):
        with pytest.raises(ProtocolError, match="never scored"):
            again.run(kind, progress=False)
    # prose edits keep the hash; a protocol naming a fresh test set is accepted
    reworded = {**protocol(val=["bob"], test=["dee"]), "question": "reworded"}
    assert make(tmp_path, reworded).protocol.hash == study.protocol.hash
    fresh = protocol(val=["bob"], test=["cy"])
    fresh["candidates"]["wider"] = {"width": 3}
    assert len(make(tmp_path, fresh).run("select", progress=False)) == 6


def test_stale_results_are_marked(tmp_path: Path) -> None:
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]))
    study.run("select", progress=False)
    study.run("test", progress=False)
    fresh = protocol(val=["bob"], test=["cy"])
    fresh["seeds"] = {"select": [0, 1], "test": [0]}
    view = View(make(tmp_path, fresh))
    text = "\n".join(readme_block(view))
    assert "3 test result(s) were made under an earlier protocol" in text and "| stale |" in text


def test_resume_skips_stored_runs(tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]), calls)
    study.run("select", shard=(0, 2), progress=False)
    assert len(calls) == 2
    again = make(tmp_path, protocol(val=["bob"], test=["dee"]), calls)
    assert len(again.run("select", progress=False)) == 2 and len(calls) == 4
    assert again.run("select", progress=False) == [] and len(calls) == 4


def test_merge_joins_parts_and_refuses_disagreement(tmp_path: Path) -> None:
    proto = protocol(val=["bob"], test=["dee"])
    a = make(tmp_path, proto, store=tmp_path / "a.json")
    b = make(tmp_path, proto, store=tmp_path / "b.json")
    a.run("select", shard=(0, 2), progress=False)
    b.run("select", shard=(1, 2), progress=False)
    main_store = Store(tmp_path / "toy" / "store.json", "toy")
    assert main_store.merge([Store(tmp_path / "a.json", "toy"), Store(tmp_path / "b.json", "toy")]) == 4
    assert main_store.merge([Store(tmp_path / "a.json", "toy")]) == 0
    main_store.save()
    assert len(make(tmp_path, proto).run("select", progress=False)) == 0
    data = json.loads((tmp_path / "b.json").read_text())
    data["records"][0]["scores"] = {"val": {"accuracy": 0.0}}
    (tmp_path / "b.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="disagree"):
        main_store.merge([Store(tmp_path / "b.json", "toy")])


def test_merge_joins_detail_parts_measured_elsewhere(tmp_path: Path) -> None:
    # a measurement made on another machine (a GPU) is a detail part of a store of its own
    (tmp_path / "gpu.json").write_text(json.dumps({"study": "toy", "protocols": {}, "scored": {}, "records": [],
                                                   "detail": {"speed_cuda": {"rows": [1, 2]}}}))
    main_store = Store(tmp_path / "store.json", "toy")
    assert main_store.merge([Store(tmp_path / "gpu.json", "toy")]) == 1
    assert main_store.data["detail"]["speed_cuda"] == {"rows": [1, 2]}
    assert main_store.merge([Store(tmp_path / "gpu.json", "toy")]) == 0  # the same part again: nothing new
    (tmp_path / "other.json").write_text(json.dumps({"study": "toy", "protocols": {}, "scored": {}, "records": [],
                                                     "detail": {"speed_cuda": {"rows": [3]}}}))
    with pytest.raises(ValueError, match="different detail parts 'speed_cuda'"):
        main_store.merge([Store(tmp_path / "other.json", "toy")])


def test_pages_render_byte_identically(tmp_path: Path) -> None:
    """`python -m studies render` rewrites every study README, the docs blocks and docs/results.md exactly
    as committed, from the committed stores."""
    root = Path(__file__).resolve().parents[2]
    written = render(out=tmp_path)
    assert Path("docs/results.md") in written
    for rel in written:
        assert (tmp_path / rel).read_text() == (root / rel).read_text(), f"{rel} differs from its rendering"


def test_cli_names_the_studies(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit, match="no study 'no_such_study'"):
        main(["no_such_study", "select"])
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "python -m studies" in capsys.readouterr().out


def test_every_committed_study_plugs_in() -> None:
    """Each study folder has a protocol the runner reads, a module with resolve() and run(), and a store
    whose every record names a protocol it keeps; test records carry the items they were scored on."""
    from studies._runner.render import studies

    names = studies()
    assert {"graph_masks_actor", "speech_strings", "rnn_attention", "recipe_runs"} <= set(names)
    for name in names:
        study = Study.load(name)
        assert callable(study.module.resolve) and callable(study.module.run), name
        assert (study.folder / "README.md").read_text().count("<!-- results:start") == 1, name
        for r in study.store.records:
            assert r["protocol"] in study.store.data["protocols"], (name, r["candidate"])
            if r["kind"] == "test":
                assert r["protocol"] in study.store.scored, (name, r["candidate"])


def nested(val_a: list[str], val_b: list[str], **extra: Any) -> dict[str, Any]:
    """Two folds, each selecting on its own inner sets: fold a tests dee, fold b tests cy."""
    sets = {"train_a": {"speakers": ["ann", "bob", "cy"]}, "test_a": {"speakers": ["dee"]},
            "train_b": {"speakers": ["ann", "bob", "dee"]}, "test_b": {"speakers": ["cy"]},
            "in_a": {"speakers": ["ann"]}, "val_a": {"speakers": val_a},
            "in_b": {"speakers": ["ann"]}, "val_b": {"speakers": val_b}}
    return {**protocol([], []), "sets": sets,
            "splits": {f: {"train": f"train_{f}", "test": [f"test_{f}"],
                           "inner": {"train": f"in_{f}", "validation": [f"val_{f}"]}} for f in "ab"},
            "select": {"metric": "accuracy", "mode": "max", "per": "split"}, **extra}


def test_per_split_selection_refuses_that_splits_test_speaker(tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []
    study = make(tmp_path, nested(val_a=["bob"], val_b=["dee", "cy"]), calls)  # fold b validates on its test cy
    with pytest.raises(ProtocolError, match="'val_b' shares 1 speaker.*'test_b': cy"):
        study.run("select", progress=False)
    assert not calls
    bad_train = nested(val_a=["bob"], val_b=["bob"])
    bad_train["sets"]["in_b"] = {"speakers": ["ann", "cy"]}
    with pytest.raises(ProtocolError, match="inner training set 'in_b' shares 1 speaker"):
        make(tmp_path, bad_train).check()


def test_per_split_selection_accepts_another_splits_test_speaker(tmp_path: Path) -> None:
    calls: list[tuple[Any, ...]] = []
    study = make(tmp_path, nested(val_a=["cy"], val_b=["dee"]), calls)  # each validates on the other's test
    study.run("select", progress=False)
    assert {c[2] for c in calls} == {("val_a",), ("val_b",)}  # selection scores the inner validation only
    for r in study.store.records:  # fold b's narrow candidate wins there
        if r["split"] == "b" and r["candidate"] == "narrow":
            r["scores"]["val_b"]["accuracy"] = 1.0
    assert study.selected("a") == ["wide"] and study.selected("b") == ["narrow"]
    new = study.run("test", progress=False)
    assert sorted({(r["split"], r["candidate"]) for r in new}) == [("a", "wide"), ("b", "narrow")]
    with pytest.raises(ProtocolError, match="shares"):  # the same protocol checked globally is refused
        make(tmp_path, {**nested(val_a=["cy"], val_b=["dee"]), "select": {"metric": "accuracy"}}).check()


def test_retest_names_the_scored_protocols_and_marks_results_exploratory(tmp_path: Path) -> None:
    first = make(tmp_path, protocol(val=["bob"], test=["dee"], test_candidates=["wide"]))
    first.run("test", progress=False)
    old = first.protocol.hash
    again = protocol(val=["cy"], test=["dee"], test_candidates=["narrow"])
    with pytest.raises(ProtocolError, match="never scored"):
        make(tmp_path, again).run("test", progress=False)
    why = "the study has only these speakers"
    study = make(tmp_path, {**again, "retest": {"protocols": [old], "why": why}})
    new = study.run("test", progress=False)
    assert new and all(r["exploratory"] == why for r in new)
    assert f"**exploratory**: it scores again the test data of protocol(s) `{old}` ({why})" in "\n".join(
        readme_block(View(study)))


def test_a_moved_config_keeps_the_hash_until_its_content_changes(tmp_path: Path) -> None:
    from studies._runner.protocol import content_hash, protocol_hash

    config = tmp_path / "configs" / "small.yaml"
    config.parent.mkdir()
    config.write_text("# the small model\nwidth: 1\n")
    before = protocol(val=["bob"], test=["dee"], test_candidates=["wide"])
    before["candidates"]["wide"]["config"] = "recipes/configs/small.yaml"
    after = json.loads(json.dumps(before))
    after["candidates"]["wide"]["config"] = str(config)
    after["moved"] = {"recipes/configs/small.yaml": {"to": str(config), "content": content_hash(config)}}
    assert protocol_hash(after) == protocol_hash(before) != protocol_hash({**after, "moved": {}})
    study = make(tmp_path, after)
    study.run("test", progress=False)
    config.write_text("# the small model, described again\nwidth: 1\n")  # comments aside: the same content
    assert not any(View(study).stale(r) for r in study.store.records)
    assert "content (comments aside) is the one the runs used" in "\n".join(readme_block(View(study)))
    config.write_text("width: 2\n")
    assert all(View(study).stale(r) for r in study.store.records)
    with pytest.raises(ProtocolError, match="content changed since the move"):
        study.check()


def test_measure_reads_the_study_options_and_refuses_unknown_ones(tmp_path: Path) -> None:
    from studies._runner.cli import _value, measure

    assert _value([0], "1,2, 3") == [1, 2, 3] and _value(0, "7") == 7 and _value(None, "x") == "x"
    assert _value(["Full"], "Full,Chunk(8, 2)") == ["Full", "Chunk(8, 2)"] and _value(False, "true") is True
    study = Study.load("speech_strings", tmp_path / "store.json")
    with pytest.raises(SystemExit, match="unknown option 'nope'"):
        measure(study, "cost", ["nope=1"], "test")
    with pytest.raises(SystemExit, match="unknown part 'nope'"):
        measure(study, "nope", [], "test")
    with pytest.raises(SystemExit, match="has no measurements"):
        measure(Study.load("tu_splits", tmp_path / "tu.json"), "x", [], "test")
    assert not (tmp_path / "store.json").exists()  # nothing ran, nothing stored


def test_status_tells_stored_under_way_and_missing_runs(tmp_path: Path) -> None:
    """``status``: per kind, a table of candidates by seed (a stored run's score, how far a fit the module
    follows has gone, else a dash), then a line per fit under way with its pace and the time it has to go."""
    study = make(tmp_path, protocol(val=["bob"], test=["dee"]))
    study.run("select", shard=(0, 2), progress=False)  # narrow seed 0, wide seed 0
    lines = study.status(now=1000.0)
    assert lines[0] == f"toy: protocol {study.protocol.hash}"
    assert "select: 2 stored, 2 missing of 4 runs" in lines
    header = lines.index("select: 2 stored, 2 missing of 4 runs") + 1
    assert lines[header].split() == ["candidate", "seed", "0", "seed", "1"]
    assert lines[header + 1].split() == ["narrow", "0.102", "-"] and lines[header + 2].split() == ["wide", "0.202", "-"]
    assert "test: the candidate to test is chosen once every selection run is stored" in lines

    def progress(candidate: dict[str, Any], seed: int, kind: str, budget: dict[str, Any]) -> dict[str, Any] | None:
        if (candidate["width"], seed, kind) != (2, 1, "select"):
            return None
        return {"epochs": 30, "max_epochs": 250, "best": 0.61234, "best_epoch": 27, "epoch_s": 100.0,
                "written": 880.0, "finished": False, "run_dir": "runs/wide_1"}

    study.module.progress = progress  # type: ignore[attr-defined]
    lines = study.status(now=1000.0)
    assert "select: 2 stored, 1 under way, 1 missing of 4 runs" in lines
    assert "30 of 250 epochs" in lines[lines.index("select: 2 stored, 1 under way, 1 missing of 4 runs") + 3]
    assert lines[-2:] == ["under way (not stored yet):", "  wide seed 1 (select): 30 of 250 epochs, best val "
                          "accuracy 0.6123 (epoch 27), 100 s an epoch, about 6 h 07 min to go; last written 2 min "
                          "ago (runs/wide_1)"]
    study.run("select", progress=False)
    lines = study.status()
    assert "select: 4 stored of 4 runs" in lines and "under way (not stored yet):" not in lines
    assert "test: 0 stored, 3 missing of 3 runs" in lines  # the winner (wide), seeds 0-2


def test_status_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["peptides_field", "status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("peptides_field: protocol ") and "select: " in out and "fingerprint" in out
