from __future__ import annotations

from pathlib import Path

import pytest

from studies.speakers.loso import CANDIDATES, SPEAKERS, command, fold_speakers, table


def test_folds_hold_out_two_different_speakers_each() -> None:
    folds = [fold_speakers(i) for i in range(len(SPEAKERS))]
    assert [test for test, _ in folds] == list(SPEAKERS)  # every speaker tested once
    assert sorted(val for _, val in folds) == sorted(SPEAKERS)  # and validated on once
    assert all(test != val for test, val in folds)
    assert folds[-1] == ("yweweler", "george")  # cyclic


def test_command_names_the_split_and_the_candidate() -> None:
    cmd = command("digits", "norm", 2, ["--trainer.max_epochs=1"])
    assert "--data.test_speakers=[lucas]" in cmd and "--data.val_speakers=[theo]" in cmd
    assert "--model.adapter.init_args.utterance_norm=true" in cmd and cmd[-1] == "--trainer.max_epochs=1"
    strings = command("strings", "specaugment", 0, [])
    assert "--data.init_args.test_speakers=[george]" in strings and "--data.init_args.val_speakers=[jackson]" in strings
    assert set(CANDIDATES) == {"specaugment", "norm", "norm_speed_noise", "transfer", "transfer_freeze",
                               "transfer_freeze_voices"}
    voices = command("digits", "transfer_freeze_voices", 0, [])
    assert "--data.extra_voices=speech_commands_test_v0.02" in voices and "--data.extra_voices_repeats=4" in voices
    assert "--model.freeze_encoder_epochs=5" in voices
    with pytest.raises(ValueError, match="not for --task strings"):
        command("strings", "transfer_freeze_voices", 0, [])
    transfer = command("digits", "transfer_freeze", 0, [])
    assert "--model.init_from=speech_commands_8k" in transfer and "--model.freeze_encoder_epochs=5" in transfer
    assert "--model.init_args.init_from=speech_commands_8k" in command("strings", "transfer", 0, [])
    # the commands of the earlier candidates are unchanged, so their stored runs are found again
    assert command("digits", "specaugment", 1, []) == [
        "recipes/speech_truncated.py", "fit", "--config=recipes/configs/speech_truncated.yaml",
        "--data.test_speakers=[jackson]", "--data.val_speakers=[lucas]", "--trainer.enable_progress_bar=false",
    ]


def test_table_means_and_sample_std() -> None:
    runs = [
        {"candidate": "norm", "fold": f, "val": v, "test": t}
        for f, v, t in [(0, 0.8, 0.5), (1, 0.9, 0.7), (2, 1.0, 0.9)]
    ]
    lines = table(runs).splitlines()
    assert lines[0].startswith("| candidate | george (val jackson) |")
    assert lines[2] == "| norm | 80.0 / 50.0 | 90.0 / 70.0 | 100.0 / 90.0 | 90.00 ± 10.00 | 70.00 ± 20.00 |"


def test_selection_runs_store_no_test_number() -> None:
    runs = [{"candidate": "v", "fold": f, "val": v, "test": None} for f, v in [(0, 0.8), (1, 0.9)]]
    assert table(runs).splitlines()[2] == "| v | 80.0 / - | 90.0 / - | 85.00 ± 7.07 | - |"


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
