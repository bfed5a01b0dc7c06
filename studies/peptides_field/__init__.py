"""Peptides-func at the field's budget: the GPS config beside its peers (message passing alone, the Exphormer
expander mask, Morgan fingerprints into trees) on LRGB's official split, four seeds.

A recipe candidate (``"peer": "recipe"``) is one ``recipes/graph_graph.py fit`` per seed with the candidate's
configs and arguments, in its own run directory (``runs/studies/peptides_field/<candidate>_<seed>``): a
selection run passes ``--test_after_fit false`` (it validates its best checkpoint, no test number); the test
run of the same candidate and seed resumes that fit from its last checkpoint (a finished fit trains no
further) and tests its best checkpoint, so a candidate and seed cost one fit; a stopped fit resumes too.
The fingerprint candidate (``"peer": "fingerprint"``, :mod:`studies.peptides_field.fingerprint`) scores
its whole grid on validation in each selection run; its test runs train only the grid point with the
highest mean validation AP over the selection runs (read from the study's store) and score the test set.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from studies._runner import Items
from studies._runner.protocol import ProtocolError, content_hash

FOLDER = Path(__file__).resolve().parent
ROOT = FOLDER.parents[1]
#: The store whose selection runs choose the fingerprint peer's grid point for its test runs.
STORE = FOLDER / "store.json"
#: The peers of the GPS config, in the order of the pages, with what each says.
PEERS = {"mpnn": "message passing alone (GCN, RWSE)", "exphormer": "the expander mask (Exphormer)",
         "fingerprint": "Morgan fingerprints into trees (short range only)"}
_BEST = re.compile(r"best-epoch=(\d+)-(\w+)=([0-9.]+)\.ckpt$")  # the recipe's best checkpoint
LABELS = {"gps": "GPS (the recipe's config)", **PEERS}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"part": "val"}``: that part of the official split, as graph indices (the data module's)."""
    from attnmm.data import GraphDataModule

    dm = GraphDataModule(name="peptides-func", pe="none")
    dm.setup("fit")
    index = dm.split_indices[spec["part"]].tolist()
    return Items.of(index, graph=[f"peptides:{i}" for i in index])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    if candidate["peer"] == "fingerprint":
        return _fingerprint(candidate, seed, train, evaluate, budget)
    return _recipe(candidate, seed, evaluate, budget)


# ---------------------------------------------------------------------------------------------- the fingerprint peer
def chosen_point(candidate: dict[str, Any], records: list[dict[str, Any]]) -> tuple[str, dict[str, float]]:
    """The fingerprint grid point with the highest mean validation AP over the selection ``records`` (the
    store's selection runs of the candidate under the current protocol), and every point's mean."""
    from studies.peptides_field.fingerprint import choose, grid

    names = list(grid(candidate["grid"]))
    runs = [{n: statistics.fmean(s.values()) for n, s in r["detail"]["points"].items()} for r in records]
    return choose(runs, names)


def _fingerprint(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    from studies.peptides_field import fingerprint

    sets = {name: evaluate[name].payload for name in evaluate}
    threads = 1  # LightGBM on one thread: the same trees on any machine
    if evaluate.kind == "select":
        return fingerprint.run(candidate, seed, train.payload, sets, threads=threads)
    from studies._runner.protocol import Protocol
    from studies._runner.store import Store

    protocol = Protocol(json.loads((FOLDER / "protocol.json").read_text()))
    records = [r for r in Store(STORE, FOLDER.name).select("select", protocol.hash)
               if r["candidate"] == candidate["name"]]
    if len(records) < len(protocol.seeds("select")):
        raise ProtocolError(f"the fingerprint peer's test needs its {len(protocol.seeds('select'))} selection runs "
                            f"in {STORE} (found {len(records)}): run its selection first "
                            "(python -m studies peptides_field select --candidate fingerprint), merging any parts")
    point, means = chosen_point(candidate, records)
    scores, detail = fingerprint.run(candidate, seed, train.payload, sets, point=point, threads=threads)
    return scores, {**detail, "mean_val_ap": means[point]}


# ---------------------------------------------------------------------------------------------- the recipe's peers
def command(candidate: dict[str, Any], seed: int, select: bool, resume: bool, threads: int) -> list[str]:
    """The recipe's ``fit`` command line of a candidate (paths relative to the repository)."""
    cmd = ["recipes/graph_graph.py", "fit"]
    for config in candidate["configs"]:
        cmd += ["--config", config]
    cmd += ["--seed_everything", str(seed), "--torch_threads", str(threads), *candidate.get("args", [])]
    cmd += ["--test_after_fit", "false" if select else "true"]
    return cmd + (["--ckpt_path", "last"] if resume else [])


def _recipe(candidate: dict[str, Any], seed: int, evaluate: Any, budget: dict[str, Any]) -> Any:
    from studies._graphs.splits import fit_split, read_run

    select = evaluate.kind == "select"
    stage = "val" if select else "test"
    run_dir = Path(budget.get("workdir", ROOT / "runs" / "studies")) / "peptides_field" / f"{candidate['name']}_{seed}"
    configs = {c: content_hash(ROOT / c) for c in candidate["configs"]}
    done = _finished(run_dir, stage, read_run)
    if done is None:
        _same_configs(run_dir, configs)
        resume = any(run_dir.glob("**/last*.ckpt"))
        cmd = command(candidate, seed, select, resume, budget.get("threads", 1))
        print(f"  {candidate['name']} seed {seed}: python {' '.join(cmd)}\n    (log: {run_dir / 'log.txt'})",
              file=sys.stderr, flush=True)
        if (run_dir / "log.txt").exists():  # the earlier part's log kept beside
            (run_dir / "log.txt").rename(run_dir / f"log.{len(list(run_dir.glob('log.*.txt')))}.txt")
        done = fit_split(cmd, run_dir)
    best = [m for p in run_dir.glob("**/best-*.ckpt") if (m := _BEST.search(p.name))]
    if "best_epoch" not in done and best:  # the test of a resumed fit: its best checkpoint is the fit's
        done.update(best_epoch=int(best[-1].group(1)), monitor=best[-1].group(2), monitored=float(best[-1].group(3)))
    metrics = done["metrics"]
    detail = {k: done[k] for k in ("command", "best_epoch", "monitor", "monitored", "wall_s") if k in done}
    detail.update(metrics=metrics, configs=configs)
    return {name: {"ap": metrics[f"{stage}_ap"]} for name in evaluate}, detail


def _same_configs(run_dir: Path, configs: dict[str, str]) -> None:
    """Record the configs' content at a fit's start; refuse to resume a fit whose configs changed since."""
    path = run_dir / "configs.json"
    if path.exists() and json.loads(path.read_text()) != configs:
        raise ProtocolError(f"the configs of the fit in {run_dir} changed since it started ({path}): resuming it "
                            "would mix two configs; move that run directory away to start the fit again")
    run_dir.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(configs, indent=1) + "\n")


def _finished(run_dir: Path, stage: str, read_run: Any) -> dict[str, Any] | None:
    """A fit of this stage that finished in ``run_dir`` before its record was stored (else None)."""
    try:
        done = read_run(run_dir)
    except FileNotFoundError:
        return None
    return done if f"{stage}_ap" in done["metrics"] else None


# ---------------------------------------------------------------------------------------------- pages
def _tests(view: Any) -> dict[str, dict[int, dict[str, Any]]]:
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in view.records("test"):
        if r["protocol"] == view.protocol.hash:
            out.setdefault(r["candidate"], {})[r["seed"]] = r
    return out


def _ap(r: dict[str, Any]) -> float:
    return float(r["scores"]["test"]["ap"])


def interval(diffs: list[float], level: float = 0.95) -> tuple[float, float] | None:
    """The t interval of the mean of paired differences (None under two)."""
    if len(diffs) < 2:
        return None
    from scipy.stats import t

    half = float(t.ppf(0.5 + level / 2, len(diffs) - 1)) * statistics.stdev(diffs) / math.sqrt(len(diffs))
    mean = statistics.fmean(diffs)
    return mean - half, mean + half


def render(view: Any) -> list[str]:
    from studies._runner.render import table
    from studies._runner.stats import mean_std

    p = view.protocol
    tests = _tests(view)
    seeds = p.seeds("test")
    lines = ["### Test AP, official split", ""]
    rows = []
    for name in p.candidates:
        mine = tests.get(name, {})
        cells = [f"{_ap(mine[s]):.4f}" if s in mine else "—" for s in seeds]
        result = f"**{mean_std([_ap(r) for r in mine.values()], digits=4)}**" if mine else "not run yet"
        rows.append([f"`{name}`: {LABELS.get(name, name)}", *cells, result])
    lines += [*table(["candidate", *(f"seed {s}" for s in seeds), "mean ± std"], rows), ""]
    if "gps" in tests:
        diffs = []
        for peer in PEERS:
            both = sorted(set(tests["gps"]) & set(tests.get(peer, {})))
            if not both:
                continue
            d = [_ap(tests["gps"][s]) - _ap(tests[peer][s]) for s in both]
            ci = interval(d)
            shown = f"[{ci[0]:+.4f}, {ci[1]:+.4f}]" if ci else "—"
            diffs.append([f"over `{peer}`", len(d), f"{statistics.fmean(d):+.4f}", shown])
        if diffs:
            lines += ["### What the GPS config's long-range attention adds (test AP, paired by seed)", "",
                      *table(["GPS minus", "seeds", "mean difference", "95% t interval"], diffs), ""]
    lines += _grid_table(view)
    params = view.detail.get("parameters", {})
    if params:
        rows = [[f"`{n}`", *(f"{v.get(k, 0):,}" for k in ("total", "adapter", "encoder", "head"))]
                for n, v in params.items()]
        run = next(iter(params.values()))["run"]
        lines += ["### Parameters of the recipe candidates (the field's budget: at most 500k)", "",
                  *table(["candidate", "parameters", "adapter", "encoder", "head"], rows), "",
                  f"Counted by `{run['command']}` (the models built from their configs, untrained).", ""]
    walls = [f"`{n}` {sum(r['seconds'] for r in rs.values()) / 60:.1f} min ({len(rs)} test runs)"
             for n, rs in tests.items()]
    if walls:
        lines += ["Test runs' time: " + ", ".join(walls) + ".", ""]
    return lines


def _grid_table(view: Any) -> list[str]:
    from studies._runner.render import table

    cand = view.protocol.candidates.get("fingerprint")
    records = [r for r in view.records("select")
               if r["protocol"] == view.protocol.hash and r["candidate"] == "fingerprint"]
    if cand is None or not records:
        return []
    point, means = chosen_point(cand, records)
    records.sort(key=lambda r: r["seed"])
    rows = [[f"`{n}`" + (" (chosen)" if n == point else ""),
             *(f"{statistics.fmean(r['detail']['points'][n].values()):.4f}" for r in records), f"{means[n]:.4f}"]
            for n in means]
    minutes = sum(r["seconds"] for r in records) / 60
    return ["### The fingerprint peer's selection (validation AP; radius, bits, learning rate, trees)", "",
            *table(["grid point", *(f"seed {r['seed']}" for r in records), "mean"], rows), "",
            f"{len(records)} selection runs, {minutes:.1f} min in all.", ""]


def summary(view: Any) -> list[dict[str, Any]]:
    from studies._runner.stats import mean_std

    p = view.protocol.data
    rows = []
    tests = _tests(view)
    for name in (n for n in view.protocol.candidates if n in tests):
        recs = tests[name]
        rows.append({"task": p["task"], "dataset": p["dataset"], "split": p["split_protocol"],
                     "metric": f"test AP at the field's budget, {LABELS.get(name, name)}",
                     "anchors": p["anchors"],
                     "order": p["order"],
                     "result": f"{mean_std([_ap(r) for r in recs.values()], digits=4)} ({len(recs)} seeds)"})
    return rows
