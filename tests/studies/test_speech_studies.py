"""The speakers, fusion and keyword studies as the runner reads them: their protocols resolve to FSDD
recordings, the runner refuses what the corrections found (a validation speaker whose recordings are a
test fold's; a second keyword split whose test speakers the first had scored), and protocol 4 of the
speakers study chooses per fold on that fold's training speakers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from studies._runner import Items, Protocol, ProtocolError, Study, check_disjoint, check_unscored
from studies.speakers import nested

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
    p = nested.protocol()
    assert [f["test"] for f in p["folds"]] == list(p["speakers"])
    for fold in p["folds"]:
        for sel in fold["selection"]:
            assert fold["test"] not in sel["train"] and sel["val"] != fold["test"]
            assert sorted([*sel["train"], sel["val"], fold["test"]]) == sorted(p["speakers"])
    study = Study.load("speakers")
    proto = Protocol(json.loads((STUDIES / "speakers" / "protocol.json").read_text()))
    for fold in p["folds"]:  # within a fold, validation and training never touch the fold's test speaker
        t = fold["test"]
        val, test = study.resolve(f"val_sel_{t}"), study.resolve(f"test_{t}")
        train = study.resolve(f"train_sel_{t}")
        assert not val.shared(test) and not train.shared(test)
    assert proto.hash == study.protocol.hash


def test_each_fold_chooses_on_its_own_selection_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nested, "store_path", lambda part: tmp_path / f"{part}.json")
    runs = []
    for fold, (a, b) in zip(nested.protocol()["speakers"], [(0.9, 0.95), (0.8, 0.8), (0.7, 0.6), (0.5, 0.9), (1, 1)]):
        runs += [{"fold": fold, "candidate": "transfer_freeze", "val_acc": a},
                 {"fold": fold, "candidate": "transfer_freeze_voices", "val_acc": b}]
    (tmp_path / "select.json").write_text(json.dumps({"runs": runs}))
    assert nested.choices() == {"george": "transfer_freeze_voices", "jackson": "transfer_freeze",  # a tie: the earlier
                                "lucas": "transfer_freeze", "theo": "transfer_freeze_voices",
                                "yweweler": "transfer_freeze"}
    assert nested.choices(["lucas"]) == {"lucas": "transfer_freeze"}
    (tmp_path / "select.json").write_text(json.dumps({"runs": runs[:3]}))
    with pytest.raises(RuntimeError, match="not complete"):
        nested.choices()
    test = nested.runs("test", ["george"])
    assert test[0]["candidate"] == "transfer_freeze_voices" and "--test_after_fit=false" not in test[0]["command"]
    select = nested.runs("select", ["jackson"])
    assert all("--test_after_fit=false" in r["command"] and "--data.val_speakers=[lucas]" in r["command"]
               for r in select)
    assert any("--data.extra_voices=null" in r["command"] for r in select)
