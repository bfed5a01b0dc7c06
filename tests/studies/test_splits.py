"""The split studies' code: a recipe run per split on generated data under the study runner,
paired differences and the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _graph_data import write_actor, write_tu

from studies._graphs import splits
from studies._runner import Items, Study
from studies._runner.template import pages


def test_command_picks_the_split_option() -> None:
    node = splits.command("graph_node", "c.yaml", "Actor", 3, 0, ["--x", "1"])
    assert node[:2] == ["recipes/graph_node.py", "fit"] and "--data.split_index" in node
    assert node[node.index("--data.split_index") + 1] == "3" and node[-2:] == ["--x", "1"]
    tu = splits.command("graph_graph", "c.yaml", "PROTEINS", 5, 1, [])
    assert tu[tu.index("--data.fold") + 1] == "5" and "--test_after_fit" not in tu


def _store(values: dict[int, float], key: str = "test_acc", select: bool = False) -> dict:
    runs = [{"split": s, "metrics": {key: v}} for s, v in values.items()]
    return {"select": select, "runs": runs}


def _rendered(table: dict, tmp_path: Path) -> str:
    """A :func:`splits.table` as the studies' pages show it (studies/_graphs/splits.md)."""
    shared = Path(splits.__file__).with_name("splits.md")
    (tmp_path / "page.md").write_text(f"<!-- blocks {shared} -->\n<!-- block results -->\n{{% include runs %}}\n")
    return "\n".join(pages(tmp_path / "page.md", {}, {"t": table})["results"])


def test_summary_paired_differences_and_table(tmp_path: Path) -> None:
    a = _store({0: 0.40, 1: 0.38, 2: 0.37})
    b = _store({0: 0.39, 1: 0.38, 2: 0.35, 3: 0.5})
    d = splits.paired(a, b)
    assert d["splits"] == [0, 1, 2] and d["diffs"] == pytest.approx([1.0, 0.0, 2.0])
    assert d["mean"] == pytest.approx(1.0) and d["wins"] == 2 and d["ties"] == 1
    assert splits.metric_of(_store({0: 0.1}, "val_acc", select=True)) == "val_acc"
    text = _rendered(splits.table({"a": a, "b": b}), tmp_path)
    assert text.splitlines()[0] == "| run | 0 | 1 | 2 | 3 | mean ± std |"
    assert "| a | 40.00 | 38.00 | 37.00 |  | 38.33 ± 1.53 |" in text
    with pytest.raises(ValueError, match="at least 2"):
        splits.paired(_store({0: 0.1}), _store({1: 0.1}))


@pytest.mark.parametrize("recipe,name,writer", [("graph_node", "Actor", write_actor), ("graph_graph", "TOY", write_tu)])
def test_runs_every_split_and_resumes(recipe: str, name: str, writer: object, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from _recipes import fork_python_scripts

    fork_python_scripts(monkeypatch)  # each run a process of its own, without the interpreter's start each time
    writer(tmp_path / "data")  # type: ignore[operator]
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    extra = [f"--data.root={tmp_path / 'data'}", "--trainer.max_epochs=2"]
    if recipe == "graph_graph":
        extra += ["--data.batch_size=4"]
    config = "recipes/configs/graph_node.yaml" if recipe == "graph_node" else "recipes/configs/graph_graph.yaml"
    # the sets resolve to disjoint toy ids here: the generated data has no fixed split files to read
    toy_ids = lambda spec, protocol: Items.of(spec, item=[f"{spec['split']}:{spec['part']}"])  # noqa: E731
    monkeypatch.setattr(splits, "resolve", toy_ids)
    sets = {f"{p}_{k}": {"name": name, "split": k, "part": p} for k in (0, 1) for p in ("train", "val", "test")}
    protocol = {"sets": sets, "splits": {f"s{k}": {"train": f"train_{k}", "validation": [f"val_{k}"],
                                                    "test": [f"test_{k}"]} for k in (0, 1)},
                "candidates": {"x": {"extra": extra}}, "seeds": {"select": [0], "test": [0]},
                "budget": {"recipe": recipe, "config": config, "workdir": str(tmp_path / "work")}}
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "protocol.json").write_text(json.dumps(protocol))
    study = Study(folder, splits)
    new = study.run("select", progress=False)
    saved = json.loads((folder / "store.json").read_text())["records"]
    assert [r["split"] for r in saved] == ["s0", "s1"] and len(new) == 2
    for r in saved:
        assert set(r["detail"]["metrics"]) == {"val_acc", "val_loss"}  # a selection run: no test number
        assert r["detail"]["monitor"] in ("val_acc", "val_loss") and 0 <= r["detail"]["best_epoch"] <= 1
        assert set(r["scores"]) == {f"val_{r['split'][1]}"}
    assert Study(folder, splits).run("select", progress=False) == []  # stored splits are skipped


def test_cross_validation_folds_resolve_to_graphs_and_their_selection_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TU set's folds resolve to graph indices: one fold's validation is disjoint from its own test fold, and
    the runner refuses a selection over folds, whose validation graphs are other folds' test graphs."""
    from studies._runner import ProtocolError

    write_tu(tmp_path / "data", "TOY", graphs=40)
    monkeypatch.setenv("ATTNMM_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    splits._indices.cache_clear()
    sets = {f"{p}_{k}": {"name": "TOY", "split": k, "part": p} for k in range(10) for p in ("train", "val", "test")}
    one = {"sets": sets, "train": "train_0", "validation": ["val_0"], "test": ["test_0"],
           "candidates": {"x": {"extra": []}}}
    folder = tmp_path / "one"
    folder.mkdir()
    (folder / "protocol.json").write_text(json.dumps(one))
    Study(folder, splits).check()  # within a fold, validation and test are apart
    every = {**one, "splits": {f"f{k}": {"train": f"train_{k}", "validation": [f"val_{k}"], "test": [f"test_{k}"]}
                               for k in range(10)}}
    folder = tmp_path / "every"
    folder.mkdir()
    (folder / "protocol.json").write_text(json.dumps(every))
    with pytest.raises(ProtocolError, match=r"shares \d+ graph\(s\)"):
        Study(folder, splits).check()
    splits._indices.cache_clear()
