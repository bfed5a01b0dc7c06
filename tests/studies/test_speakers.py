from __future__ import annotations

from pathlib import Path

from studies.speakers import SPEAKERS


def test_the_runner_runs_a_fold_of_the_nested_protocol(tmp_path: Path) -> None:
    """``python -m studies speakers select|test`` on one fold, tiny: the selection trains on the inner
    training speakers and scores only the inner validation speaker; the test trains the fold's winner on
    its four training speakers and scores the held-out one, marked exploratory (FSDD's speakers were all
    tested before)."""
    import json

    from _recipes import write_fsdd

    import studies.speakers as module
    from studies._runner import Study

    write_fsdd(tmp_path / "data", speakers=SPEAKERS, takes=3)
    proto = json.loads((Path(module.__file__).parent / "protocol.json").read_text())
    proto["splits"] = {"george": proto["splits"]["george"]}
    proto["candidates"] = {"scratch": ["--model.init_from=null", "--model.freeze_encoder_epochs=0"]}
    proto["budget"] = {"epochs": 1, "args": [f"--data.root={tmp_path / 'data'}", "--data.batch_size=16",
                                             "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1",
                                             "--trainer.limit_test_batches=1"]}
    folder = tmp_path / "speakers"
    folder.mkdir()
    (folder / "protocol.json").write_text(json.dumps(proto))
    study = Study(folder, module)
    selection = study.run("select", progress=False)
    assert {tuple(r["scores"]) for r in selection} == {("val_sel_george",)}
    assert all("test" not in json.dumps(r["scores"]) for r in selection)
    (test,) = study.run("test", progress=False)
    assert test["split"] == "george" and set(test["scores"]) == {"test_george"}
    assert 0 <= test["scores"]["test_george"]["accuracy"] <= 100 and "val_draw" in test["detail"]
    assert test["exploratory"].startswith("FSDD has five speakers")
    assert study.store.scored[study.protocol.hash]["speaker"] == ["george"]
