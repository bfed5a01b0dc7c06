"""Peptides-func at the field's budget: the GPS config beside its peers (message passing alone, the Exphormer
expander mask, Morgan fingerprints into trees: :mod:`.fingerprint`) on LRGB's official split, four seeds.

A recipe candidate is one ``recipes/graph_graph.py fit`` per seed with its configs, in its own run directory
(``runs/studies/peptides_field/<candidate>_<seed>``); the test run of a candidate and seed tests the checkpoint
that fit kept (:func:`~studies._runner.train.fit_scores` with ``resume``). ``page.md`` writes
the results block from the store, with the names :func:`context` adds.
"""

from __future__ import annotations

from pathlib import Path
from statistics import fmean
from typing import Any

from studies._runner import Items
from studies._runner.stats import mean_std, paired, t_interval
from studies._runner.train import fit_progress, fit_scores, workdir

LABELS = {"gps": "GPS (the recipe's config)", "mpnn": "message passing alone (GCN, RWSE)", "exphormer":
          "the expander mask (Exphormer)", "fingerprint": "Morgan fingerprints into trees (short range only)"}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"part": "val"}``: that part of the official split, as graph indices (the data module's)."""
    from studies._graphs.splits import _indices

    index = _indices("peptides-func", 0)[spec["part"]]
    return Items.of(index, graph=[f"peptides:{i}" for i in index])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    threads = budget.get("threads", 1)
    if candidate["peer"] == "fingerprint":
        from studies.peptides_field import fingerprint

        return fingerprint.run(candidate, seed, train, evaluate)
    cmd = ["recipes/graph_graph.py", "fit", *(a for c in candidate["configs"] for a in ("--config", c)),
           "--seed_everything", str(seed), "--torch_threads", str(threads), *candidate.get("args", [])]
    return fit_scores(cmd, _run_dir(candidate, seed, budget), evaluate, "ap", threads, resume=True)


def _run_dir(candidate: dict[str, Any], seed: int, budget: dict[str, Any]) -> Path:
    return workdir(budget) / "peptides_field" / f"{candidate['name']}_{seed}"


def progress(candidate: dict[str, Any], seed: int, kind: str, budget: dict[str, Any]) -> dict[str, Any] | None:
    """How far a recipe candidate's selection fit has gone (``python -m studies peptides_field status``); a test
    run tests the checkpoint that fit kept, nothing to follow."""
    if candidate["peer"] != "recipe" or kind != "select":
        return None
    return fit_progress(_run_dir(candidate, seed, budget), "ap")


def _kept_and_last(record: dict[str, Any]) -> str:
    """A selection record's kept checkpoint: its validation AP and epoch, and the last epoch's where the
    record holds the fit's epochs (:func:`~studies._runner.train.history`)."""
    text = f"{record['scores']['val']['ap']:.4f} (epoch {record['detail']['best_epoch']})"
    epochs = record["detail"].get("history", {}).get("epoch")
    if epochs:
        text += f"; last {record['detail']['history']['val'][-1]:.4f} (epoch {epochs[-1]})"
    return text


def curves(view: Any) -> dict[str, dict[int, dict[str, Any]]]:
    """The epochs of each recipe fit whose selection record holds them (:func:`~studies._runner.train.history`):
    candidate -> seed -> ``{"epoch", "val", "train_loss", "kept"}`` (``kept``: the epoch of its kept checkpoint)."""
    p = view.protocol
    found: dict[str, dict[int, dict[str, Any]]] = {}
    for r in view.store.select("select", p.hash):
        history = r.get("detail", {}).get("history", {})
        if history.get("epoch"):
            found.setdefault(r["candidate"], {})[r["seed"]] = {**history, "kept": r["detail"]["best_epoch"]}
    return {c: dict(sorted(found[c].items())) for c in p.candidates if c in found}


def figure(view: Any) -> Any:
    """The recipe fits' epochs: validation AP (left) and training loss (right, log scale), a line of its own
    colour per candidate and seed, the kept checkpoint's epoch marked."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    val, loss = fig.subplots(1, 2)
    fits = [(candidate, seed, h) for candidate, seeds in curves(view).items() for seed, h in seeds.items()]
    for i, (candidate, seed, h) in enumerate(fits):
        colour, label = f"C{i % 10}", f"{candidate}, seed {seed}"
        val.plot(h["epoch"], h["val"], color=colour, linewidth=1.1, label=label)
        loss.plot(h["epoch"], h["train_loss"], color=colour, linewidth=1.1, label=label)
        if h["kept"] in h["epoch"]:
            at = h["epoch"].index(h["kept"])
            val.plot([h["kept"]], [h["val"][at]], "o", color=colour, markersize=5)
    val.set(xlabel="epoch", ylabel="validation AP", title="validation AP (o: the kept checkpoint)")
    loss.set(xlabel="epoch", ylabel="training loss", yscale="log", title="training loss")
    for ax in (val, loss):
        ax.grid(alpha=0.3)
    val.legend(loc="lower right", fontsize=8)
    return fig


def context(detail: dict[str, Any], view: Any) -> dict[str, Any]:
    """The page's names: the test AP by candidate and seed, the GPS config's paired differences with each peer
    (95% t interval), and the fingerprint peer's grid over its selection runs with the chosen point."""
    from studies.peptides_field.fingerprint import chosen_point

    p = view.protocol
    tested = view.store.select("test", p.hash)
    tests = {c: {r["seed"]: r["scores"]["test"]["ap"] for r in tested if r["candidate"] == c} for c in p.candidates}
    diffs = {peer: paired(tests["gps"], tests[peer]) for peer in tests if peer != "gps"}
    runs = sorted((r for r in view.store.select("select", p.hash) if r["candidate"] == "fingerprint"),
                  key=lambda r: r["seed"])
    chosen, means = chosen_point(p.candidates["fingerprint"], runs) if runs else (None, {})
    minutes = {c: sum(r["seconds"] for r in tested if r["candidate"] == c) / 60 for c in tests}
    fitted = [r for r in view.store.select("select", p.hash) if "best_epoch" in r.get("detail", {})]
    fits = {c: {r["seed"]: _kept_and_last(r) for r in fitted if r["candidate"] == c} for c in p.candidates}
    return {"labels": LABELS, "seeds": p.seeds("test"), "tests": tests, "minutes": minutes,
            "fits": {c: f for c, f in fits.items() if f}, "curves": bool(curves(view)),
            "diffs": {p: {**d, "ci": t_interval(d["diffs"])} for p, d in diffs.items() if d}, "chosen": chosen,
            "grid": [(n, [fmean(r["detail"]["points"][n].values()) for r in runs], m) for n, m in means.items()],
            "grid_seeds": [r["seed"] for r in runs], "grid_minutes": sum(r["seconds"] for r in runs) / 60}


def summary(view: Any) -> list[dict[str, Any]]:
    """docs/results.md's rows: a candidate's mean test AP, once tested."""
    p, tests = view.protocol.data, context({}, view)["tests"]
    return [{"task": p["task"], "dataset": p["dataset"], "split": p["split_protocol"], "anchors": p["anchors"],
             "metric": f"test AP at the field's budget, {LABELS[c]}", "order": p["order"],
             "result": f"{mean_std(list(aps.values()), digits=4)} ({len(aps)} seed{'s' * (len(aps) != 1)})"}
            for c, aps in tests.items() if aps]
