"""The speakers, fusion and keyword studies as the runner reads them: their protocols resolve to FSDD
recordings, the runner refuses what the corrections found (a validation speaker whose recordings are a
test fold's; a second keyword split whose test speakers the first had scored), and protocol 4 of the
speakers study chooses per fold on that fold's training speakers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies._runner import Items, Protocol, ProtocolError, Study, check_disjoint, check_unscored

STUDIES = Path(__file__).resolve().parents[2] / "studies"


def _resolved(name: str) -> tuple[Study, dict[str, Items]]:
    study = Study.load(name)
    sets = {n: study.resolve(n) for n in study.protocol.data["sets"] if "fsdd" in study.protocol.data["sets"][n]}
    return study, sets


def test_the_fusion_protocol_is_refused_its_validation_speaker_is_a_test_fold() -> None:
    study, sets = _resolved("fusion")
    assert len(sets["val_jackson"].ids["recording"]) == 450 and len(sets["test_jackson"].ids["recording"]) == 500
    assert sets["val_jackson"].shared(sets["test_jackson"])["recording"][:1] == ["0_jackson_10"]
    with pytest.raises(ProtocolError, match="shares 450 recording"):
        check_disjoint({"val_jackson": sets["val_jackson"]}, {"test_jackson": sets["test_jackson"]})
    flagged = [r for r in study.store.records if r["kind"] == "test" and r["split"].startswith("heldout_")]
    assert flagged and all(r["exploratory"].startswith("exploratory: selection saw test recordings") for r in flagged)


def test_the_second_keyword_split_is_refused_its_test_speakers_were_scored() -> None:
    study = Study.load("kws")
    records = [r for r in study.store.records if r["kind"] == "test"]
    first = next(r for r in records if r["split"] == "split0")["protocol"]
    scored = {first: study.store.scored[first]}
    shared = set(study.store.data["detail"]["shared_test_speakers"])
    assert len(shared) == 4 and shared <= set(scored[first]["speaker"])
    test = Items.of(None, speaker=sorted(shared | {"someone_new"}))
    with pytest.raises(ProtocolError, match="shares 4 speaker"):
        check_unscored({"test_split1": test}, scored, "another")
    assert all(r.get("exploratory") for r in records if r["split"] == "split1")
    recovered = [r for r in study.store.records if r["kind"] == "select"]
    assert recovered and all("recovered_from" in r for r in recovered)


def test_speakers_protocol_4_validates_each_fold_on_its_own_training_speakers() -> None:
    study = Study.load("speakers")
    p = study.protocol
    speakers = list(json.loads((STUDIES / "speakers" / "many_voices_nested.json").read_text())["speakers"])
    assert [s.name for s in p.splits] == speakers and p.data["select"]["per"] == "split"
    spk = {name: spec["fsdd"]["speakers"] for name, spec in p.data["sets"].items()}
    for s in p.splits:
        (test,), (val,), inner = s.test, s.validation, s.inner_train
        assert spk[test] == [s.name] and s.name not in spk[inner] and spk[val] != [s.name]
        assert sorted([*spk[inner], *spk[val], s.name]) == sorted(speakers)
    proto = Protocol(json.loads((STUDIES / "speakers" / "protocol.json").read_text()))
    for s in p.splits:  # within a fold, validation and training never touch the fold's test speaker
        t = s.name
        val, test = study.resolve(f"val_sel_{t}"), study.resolve(f"test_{t}")
        train = study.resolve(f"train_sel_{t}")
        assert not val.shared(test) and not train.shared(test)
    study.check()  # the runner's per-split check accepts it (another fold's test speaker may validate here)
    assert proto.hash == study.protocol.hash


def test_each_fold_chooses_on_its_own_selection_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import studies.speakers as module
    from studies._runner import Sets

    study = Study.load("speakers", tmp_path / "store.json")
    h = study.protocol.hash
    runs = []
    for fold, (a, b) in zip([s.name for s in study.protocol.splits],
                            [(0.9, 0.95), (0.8, 0.8), (0.7, 0.6), (0.5, 0.9), (1, 1)]):
        runs += [{"kind": "select", "split": fold, "candidate": c, "seed": 0, "protocol": h,
                  "scores": {f"val_sel_{fold}": {"accuracy": v}}} for c, v in (("transfer_freeze", a),
                                                                              ("transfer_freeze_voices", b))]
    for r in runs:
        study.store.add(r)
    chosen = {s.name: study.selected(s.name)[0] for s in study.protocol.splits}
    assert chosen == {"george": "transfer_freeze_voices", "jackson": "transfer_freeze",  # a tie: the earlier
                      "lucas": "transfer_freeze", "theo": "transfer_freeze_voices", "yweweler": "transfer_freeze"}
    assert study.selected("lucas") == ["transfer_freeze"]
    study.store.data["records"] = runs[:3]
    with pytest.raises(ProtocolError, match="selection runs are missing"):
        study.selected("lucas")
    commands: list[list[str]] = []

    def fake_fit(recipe: str, args: list[str], epochs: int | None, seed: int, collect: object) -> dict[str, float]:
        commands.append(args)
        return {"best_val_acc": 0.5, "test_acc": 0.5}

    monkeypatch.setattr(module, "run_fit", fake_fit)
    p = study.protocol
    split = p.split("george")
    module.run(p.candidates["transfer_freeze_voices"], 0, study.resolve(split.train),
               Sets("test", {"test_george": study.resolve("test_george")}, p), p.data["budget"])
    assert "--test_after_fit=false" not in commands[-1] and "--data.test_speakers=[george]" in commands[-1]
    split = p.split("jackson")
    for c in p.candidates.values():
        module.run(c, 0, study.resolve(split.inner_train), Sets("select", {"val_sel_jackson":
                   study.resolve("val_sel_jackson")}, p), p.data["budget"])
    select = commands[1:]
    assert all("--test_after_fit=false" in cmd and "--data.val_speakers=[lucas]" in cmd
               and "--data.test_speakers=[jackson]" in cmd for cmd in select)
    assert any("--data.extra_voices=null" in cmd for cmd in select)
