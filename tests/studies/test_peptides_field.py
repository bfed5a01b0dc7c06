"""The Peptides field study's code: the fingerprints, the grid and its choice on validation, the Exphormer
peer's config (the expander mask is GraphAdapter's, tested with it), the recipe runs' command lines and
resumption, and the fingerprint peer's selection and test under the runner on generated peptides (the trees
replaced by a stand-in: the runner's plumbing, not LightGBM)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from _graph_data import write_peptides

import studies.peptides_field as pf
from studies._runner import Study, train
from studies._runner.protocol import ProtocolError
from studies._runner.stats import t_interval
from studies.peptides_field import fingerprint as fp


def test_morgan_bits_of_a_few_molecules() -> None:
    pytest.importorskip("rdkit")  # attnmm[chem]
    from rdkit import Chem
    from rdkit.Chem import rdFingerprintGenerator

    smiles = ["CCO", "NCC(=O)NCC(=O)O", "c1ccccc1O"]
    bits = fp.morgan(smiles, 2, 1024)
    assert bits.shape == (3, 1024) and bits.dtype == np.uint8 and set(np.unique(bits)) <= {0, 1}
    # ethanol's atoms are three different environments at radius 0: three bits
    assert fp.morgan(["CCO"], 0, 2048).sum() == 3
    # a radius's identifiers include the smaller radii's: its bits are a superset
    for r in (0, 1, 2):
        small, large = fp.morgan(smiles, r, 512), fp.morgan(smiles, r + 1, 512)
        assert np.all(large >= small) and large.sum() > small.sum()
    # the bits set are RDKit's own fingerprint's, row by row
    gen = rdFingerprintGenerator.GetMorganGenerator(radius=2, fpSize=1024)
    for row, s in zip(bits, smiles):
        assert np.flatnonzero(row).tolist() == sorted(gen.GetFingerprint(Chem.MolFromSmiles(s)).GetOnBits())
    assert np.array_equal(fp.morgan(smiles, 2, 1024), bits)  # the same every call
    with pytest.raises(ValueError, match="cannot parse SMILES 1"):
        fp.morgan(["CCO", "C1CC"], 2, 64)
    with pytest.raises(ValueError, match="radius"):
        fp.morgan(["CCO"], 2, 0)


def test_grid_names_and_choice_on_mean_validation() -> None:
    points = fp.grid({"radius": [2, 3], "bits": [1024], "lr": [0.05], "trees": [200, 400]})
    assert list(points) == ["r2_b1024_lr0.05_t200", "r2_b1024_lr0.05_t400", "r3_b1024_lr0.05_t200",
                            "r3_b1024_lr0.05_t400"]
    assert points["r3_b1024_lr0.05_t400"] == {"radius": 3, "bits": 1024, "lr": 0.05, "trees": 400}
    names = list(points)
    runs = [dict(zip(names, (0.50, 0.60, 0.55, 0.58))), dict(zip(names, (0.52, 0.54, 0.57, 0.58)))]
    chosen, means = fp.choose(runs, names)
    assert chosen == "r3_b1024_lr0.05_t400" and means[chosen] == pytest.approx(0.58)
    assert means["r2_b1024_lr0.05_t400"] == pytest.approx(0.57)  # one seed's best is not the mean's
    tie = [dict(zip(names, (0.6, 0.6, 0.5, 0.5)))]
    assert fp.choose(tie, names)[0] == names[0]  # ties to the earlier point
    with pytest.raises(ValueError, match="miss"):
        fp.choose([{names[0]: 0.5}], names)


def test_average_precision_is_the_mean_over_labels() -> None:
    scores = np.array([[0.9, 0.1], [0.8, 0.7], [0.3, 0.6], [0.2, 0.4]])
    labels = np.array([[1, 0], [0, 1], [1, 0], [0, 1]], dtype=np.float32)
    # label 0: ranks 1 (hit), 2, 3 (hit): (1 + 2/3) / 2; label 1: 0.7 hit, 0.6, 0.4 hit: (1 + 2/3) / 2
    assert fp.average_precision(scores, labels) == pytest.approx(5 / 6)


def test_exphormer_config_is_the_adapters_expander_scope() -> None:
    from attnmm.adapters import GraphAdapter

    config = yaml.safe_load((train.ROOT / "studies/peptides_field/configs/exphormer.yaml").read_text())
    args = config["model"]["adapter"]["init_args"]
    assert args == {"scope": "expander", "expander_degree": 4}
    assert GraphAdapter(9, 16, cardinalities=[9] * 9, **args).scope == "expander"


class _Sets(dict):  # type: ignore[type-arg]
    def __init__(self, kind: str, names: list[str]):
        super().__init__({n: None for n in names})
        self.kind = kind


def test_recipe_commands_select_test_and_resume(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate and seed cost one fit: the selection run fits without testing, a stopped fit resumes from
    its last checkpoint, the test run tests the checkpoint the finished fit kept and validated; a fit whose
    configs changed is not resumed."""
    configs = []
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(f"trainer: {{max_epochs: {len(name)}}}\n")
        configs.append(str(tmp_path / f"{name}.yaml"))
    cmds: list[list[str]] = []
    stop = [True]

    def fake_run(cmd: list[str], run_dir: Path, threads: int = 1) -> dict[str, object]:
        cmds.append(cmd)
        version = run_dir / "runs" / f"version_{len(cmds)}"
        (run_dir / "runs" / "version_1" / "checkpoints").mkdir(parents=True, exist_ok=True)
        version.mkdir(parents=True, exist_ok=True)
        (run_dir / "runs" / "version_1" / "checkpoints" / "last.ckpt").write_text("")
        if stop[0]:  # killed before its end: no metrics.json
            raise RuntimeError("the run failed")
        if cmd[1] == "fit":
            (run_dir / "runs" / "version_1" / "checkpoints" / "best-epoch=7-val_ap=0.5000.ckpt").write_text("")
        (version / "metrics.json").write_text(json.dumps({"val_ap": 0.5} if cmd[1] == "fit" else {"test_ap": 0.4}))
        return {"command": " ".join(cmd), **train.read_run(run_dir), "wall_s": 1.0}

    monkeypatch.setattr(train, "fit_recipe", fake_run)
    cand = {"name": "gps", "peer": "recipe", "configs": configs, "args": ["--x", "1"]}
    budget = {"threads": 2, "workdir": str(tmp_path / "runs")}
    with pytest.raises(ProtocolError, match="no selection fit"):
        pf.run(cand, 3, None, _Sets("test", ["test"]), budget)
    with pytest.raises(RuntimeError, match="failed"):
        pf.run(cand, 3, None, _Sets("select", ["val"]), budget)
    with pytest.raises(ProtocolError, match="has not finished"):
        pf.run(cand, 3, None, _Sets("test", ["test"]), budget)
    cmd = cmds[-1]
    assert cmd[:6] == ["recipes/graph_graph.py", "fit", "--config", configs[0], "--config", configs[1]]
    assert cmd[cmd.index("--seed_everything") + 1] == "3" and cmd[cmd.index("--torch_threads") + 1] == "2"
    assert cmd[-2:] == ["--test_after_fit", "false"] and "--x" in cmd and "--ckpt_path" not in cmd
    stop[0] = False
    scores, detail = pf.run(cand, 3, None, _Sets("select", ["val"]), budget)
    assert cmds[-1] == [*cmd[:-2], "--ckpt_path", "last", "--test_after_fit", "false"]  # the stopped fit goes on
    assert scores == {"val": {"ap": 0.5}} and set(detail["configs"]) == set(configs) and detail["best_epoch"] == 7
    assert detail["history"] == {"epoch": [], "val": [], "train_loss": []}  # (the fake writes no CSV log)
    scores, detail = pf.run(cand, 3, None, _Sets("test", ["test"]), budget)
    test = cmds[-1]  # the kept checkpoint, tested: no further training
    kept = "runs/version_1/checkpoints/best-epoch=7-val_ap=0.5000.ckpt"
    assert test == ["recipes/graph_graph.py", "test", *cmd[2:-2], "--ckpt_path", kept]
    assert scores == {"test": {"ap": 0.4}} and detail["best_epoch"] == 7
    run_dir = tmp_path / "runs" / "peptides_field" / "gps_3"
    assert len(cmds) == 3 and pf.run(cand, 3, None, _Sets("test", ["test"]), budget)[0] == scores  # read back
    # a kept checkpoint that is not the one validated, or two of them: refused
    (run_dir / "runs" / "version_1" / "checkpoints" / "best-epoch=9-val_ap=0.6000.ckpt").write_text("")
    (run_dir / "runs" / "version_3" / "metrics.json").unlink()  # as if not tested yet
    with pytest.raises(ProtocolError, match="one best-\\* checkpoint, found 2"):
        pf.run(cand, 3, None, _Sets("test", ["test"]), budget)
    (run_dir / "runs" / "version_1" / "checkpoints" / "best-epoch=7-val_ap=0.5000.ckpt").unlink()
    with pytest.raises(ProtocolError, match="not the checkpoint the fit"):
        pf.run(cand, 3, None, _Sets("test", ["test"]), budget)
    (tmp_path / "b.yaml").write_text("trainer: {max_epochs: 9}\n")
    with pytest.raises(ProtocolError, match="changed since it started"):
        pf.run(cand, 3, None, _Sets("test", ["test"]), budget)


def test_history_joins_the_parts_of_a_fit(tmp_path: Path) -> None:
    """The epochs of a fit from its CSV logs: a resumed part's epochs replace those it repeats (parts in
    version order, 10 after 2), the validation after the fit (no training loss) is left out."""
    header = "epoch,step,train_loss_epoch,train_loss_step,val_ap,val_loss\n"
    parts = {
        2: "0,9,,0.7,,\n0,10,0.60,,0.20,0.5\n1,20,0.50,,0.30,0.4\n2,25,,0.4,,\n",  # stopped in epoch 2
        10: "2,30,0.40,,0.35,0.3\n3,40,0.30,,0.33,0.3\n4,40,,,0.35,0.3\n",  # resumed; then the final validation
    }
    for version, rows in parts.items():
        log = tmp_path / "runs" / "gps" / "csv" / f"version_{version}" / "metrics.csv"
        log.parent.mkdir(parents=True)
        log.write_text(header + rows)
    assert train.history(tmp_path, "ap") == {"epoch": [0, 1, 2, 3], "val": [0.2, 0.3, 0.35, 0.33],
                                             "train_loss": [0.6, 0.5, 0.4, 0.3]}
    assert train.history(tmp_path / "none", "ap") == {"epoch": [], "val": [], "train_loss": []}


def test_page_names_the_kept_and_the_last_epoch() -> None:
    record = {"scores": {"val": {"ap": 0.51806}}, "detail": {"best_epoch": 25}}
    assert pf._kept_and_last(record) == "0.5181 (epoch 25)"
    record["detail"]["history"] = {"epoch": [0, 1, 2], "val": [0.2, 0.5181, 0.47], "train_loss": [0.6, 0.3, 0.1]}
    assert pf._kept_and_last(record) == "0.5181 (epoch 25); last 0.4700 (epoch 2)"


def test_the_fits_epochs_are_drawn_where_the_records_hold_them(tmp_path: Path) -> None:
    from studies._runner.render import View

    study = Study.load("peptides_field", store=tmp_path / "store.json")
    base = {"kind": "select", "split": "main", "protocol": study.protocol.hash, "legacy": False, "command": "",
            "commit": "", "dirty": False, "started": "", "seconds": 60.0}
    study.store.add({**base, "candidate": "exphormer", "seed": 0, "scores": {"val": {"ap": 0.5}},
                     "detail": {"best_epoch": 1}})  # (an older record: no epochs)
    assert pf.curves(View(study)) == {} and "peptides_field_curves.png" not in "\n".join(View(study).pages["results"])
    history = {"epoch": [0, 1, 2], "val": [0.3, 0.6, 0.55], "train_loss": [0.6, 0.3, 0.1]}
    for seed in (2, 0):
        study.store.add({**base, "candidate": "gps", "seed": seed, "scores": {"val": {"ap": 0.6}},
                         "detail": {"best_epoch": 1, "history": history}})
    view = View(study)
    assert list(pf.curves(view)) == ["gps"] and list(pf.curves(view)["gps"]) == [0, 2]
    assert pf.curves(view)["gps"][2] == {**history, "kept": 1}
    assert "](../../docs/figures/peptides_field_curves.png)" in "\n".join(view.pages["results"])
    val, loss = pf.figure(view).axes
    assert len(val.lines) == 4 and len(loss.lines) == 2  # a line per fit, and the kept epoch marked on the left
    assert list(val.lines[1].get_xdata()) == [1] and list(val.lines[1].get_ydata()) == [0.6]


def test_recipe_candidates_configs_exist_and_fit_the_budget() -> None:
    data = json.loads((train.ROOT / "studies" / "peptides_field" / "protocol.json").read_text())
    for name in ("gps", "mpnn", "exphormer"):
        cand = data["candidates"][name]
        assert cand["name"] == name and all((train.ROOT / c).is_file() for c in cand["configs"])
    assert data["seeds"] == {"select": [0, 1, 2, 3], "test": [0, 1, 2, 3]}
    assert data["test_candidates"] == ["gps", "mpnn", "exphormer", "fingerprint"]


def test_interval_of_paired_differences() -> None:
    assert t_interval([0.01]) is None
    lo, hi = t_interval([0.01, 0.03])
    assert lo < 0.02 < hi and (hi - 0.02) == pytest.approx(12.7062 * 0.01414214 / 2 ** 0.5, rel=1e-4)


def test_fingerprint_peer_selects_on_validation_then_tests_the_chosen_point(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """On 24 generated peptides, under the runner: the selection runs score every grid point on validation
    only; the test runs train the point of highest mean validation AP and score the test set."""
    pytest.importorskip("rdkit")  # attnmm[chem]: the peptides' graphs and fingerprints
    write_peptides(tmp_path / "data", peptides=24, split=(12, 6, 6))
    monkeypatch.setenv("ATTNMM_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    from studies._graphs.splits import _indices

    for cached in (fp._table, fp._bits, _indices):  # the generated peptides', not the real ones, and gone after
        cached.cache_clear()
        request.addfinalizer(cached.cache_clear)
    calls: list[tuple[float, tuple[int, ...], int, tuple[str, ...]]] = []

    def stand_in(x: np.ndarray, y: np.ndarray, evaluate: dict[str, np.ndarray], lr: float, trees: list[int],
                 seed: int, params: object = None, threads: int = 1) -> dict[int, dict[str, np.ndarray]]:
        calls.append((lr, tuple(trees), seed, tuple(evaluate)))
        w = np.random.default_rng(x.shape[1] + seed).normal(size=(x.shape[1], y.shape[1]))
        return {t: {n: a @ w * t for n, a in evaluate.items()} for t in trees}

    monkeypatch.setattr(fp, "fit_predict", stand_in)
    study = Study.load("peptides_field", store=tmp_path / "store.json")
    study.check()
    with pytest.raises(ProtocolError, match="selection runs"):
        study.run("test", candidates=["fingerprint"], progress=False)
    selected = study.run("select", candidates=["fingerprint"], progress=False)
    points = fp.grid(study.protocol.candidates["fingerprint"]["grid"])
    assert [r["seed"] for r in selected] == [0, 1, 2, 3]
    assert all(set(r["scores"]) == {"val"} and set(r["detail"]["points"]) == set(points) for r in selected)
    assert {c[3] for c in calls} == {("val",)} and len(calls) == 4 * 4  # 4 seeds x (radius, bits)
    point, means = fp.chosen_point(study.protocol.candidates["fingerprint"], selected)
    calls.clear()
    tested = study.run("test", candidates=["fingerprint"], progress=False)
    assert [r["seed"] for r in tested] == [0, 1, 2, 3] and all(set(r["scores"]) == {"test"} for r in tested)
    assert all(r["detail"]["point"] == point and r["detail"]["mean_val_ap"] == means[point] for r in tested)
    assert [c[1] for c in calls] == [(points[point]["trees"],)] * 4 and {c[3] for c in calls} == {("test",)}
    # the page: the test table, the grid with its choice, and what the GPS config adds, paired by seed
    from studies._runner.render import View

    for seed in range(4):
        study.store.add({"kind": "test", "split": "main", "candidate": "gps", "seed": seed,
                         "scores": {"test": {"ap": 0.6 + 0.01 * seed}}, "protocol": study.protocol.hash,
                         "legacy": False, "command": "", "commit": "", "dirty": False, "started": "", "seconds": 60.0})
    page = "\n".join(View(study).pages["results"])
    assert f"`{point}` (chosen)" in page and page.count("(chosen)") == 1
    assert "| `mpnn`: message passing alone (GCN, RWSE) | — | — | — | — | not run yet |" in page
    assert "over `fingerprint` | 4 |" in page and "over `mpnn`" not in page
    fps = [r["scores"]["test"]["ap"] for r in sorted(tested, key=lambda r: r["seed"])]
    diffs = [0.6 + 0.01 * s - a for s, a in enumerate(fps)]
    assert f"{np.mean(diffs):+.4f}" in page
    rows = pf.summary(View(study))
    assert [r["metric"].split(", ", 1)[1] for r in rows] == [
        "GPS (the recipe's config)", "Morgan fingerprints into trees (short range only)"]


def test_measure_epochs_times_each_epoch_of_the_candidates_fit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``measure epochs``: the recipe's fit from the candidate's configs, on generated peptides, for the asked
    epochs only (each timed, training and validation), in a folder thrown away; the configs' own epochs reported."""
    pytest.importorskip("rdkit")
    write_peptides(tmp_path / "data")
    monkeypatch.setenv("ATTNMM_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("ATTNMM_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    configs = Study.load("peptides_field").protocol.candidates["exphormer"]["configs"]
    got = train.epoch_seconds("graph_graph", configs, epochs=2, threads=1)
    assert got["max_epochs"] == 200 and got["threads"] == 1
    assert len(got["seconds"]) == 2 and all(s > 0 for s in got["seconds"])
    assert Path.cwd() == tmp_path and sorted(p.name for p in tmp_path.iterdir()) == ["cache", "data"]


def test_fit_progress_reads_how_far_a_fit_has_gone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fit's epochs from its CSV logs, the epochs its config asks for, its best validation score so far, the
    pace of the latest part's epochs from the TensorBoard clock; the study follows its selection fits only."""
    from torch.utils.tensorboard import SummaryWriter

    assert train.fit_progress(tmp_path / "none", "ap") is None
    run_dir = tmp_path / "runs" / "peptides_field" / "gps_1"
    version = run_dir / "runs" / "gps" / "version_0"
    version.mkdir(parents=True)
    (version / "config.yaml").write_text("trainer:\n  max_epochs: 200\n")
    log = run_dir / "runs" / "gps" / "csv" / "version_0" / "metrics.csv"
    log.parent.mkdir(parents=True)
    log.write_text("epoch,step,train_loss_epoch,val_ap\n0,10,0.6,0.30\n1,20,0.5,0.45\n2,30,0.4,0.41\n")
    for part, clock in enumerate(([0.0, 130.0], [5000.0, 5100.0, 5190.0, 5300.0])):  # the first part: stopped
        writer = SummaryWriter(str(run_dir / "runs" / "gps" / f"version_{part}"))
        for step, when in enumerate(clock):
            writer.add_scalar("val_ap", 0.3, step, walltime=when)
        writer.close()
    got = train.fit_progress(run_dir, "ap")
    assert got is not None
    assert {k: got[k] for k in ("epochs", "max_epochs", "best", "best_epoch", "epoch_s", "finished")} == {
        "epochs": 3, "max_epochs": 200, "best": 0.45, "best_epoch": 1, "epoch_s": 100.0, "finished": False}
    monkeypatch.chdir(tmp_path)
    budget = {"workdir": str(tmp_path / "runs")}
    gps = {"name": "gps", "peer": "recipe"}
    assert pf.progress(gps, 1, "select", budget)["run_dir"] == "runs/peptides_field/gps_1"  # type: ignore[index]
    assert pf.progress(gps, 1, "test", budget) is None and pf.progress(gps, 2, "select", budget) is None
    assert pf.progress({"name": "fingerprint", "peer": "fingerprint"}, 1, "select", budget) is None
    (version / "metrics.json").write_text("{}")
    assert train.fit_progress(run_dir, "ap")["finished"]  # type: ignore[index]
