"""The recipes' own runs: each recipe's default config (and the variants its page presents) as a user runs it;
a run is the recipe's ``fit`` in a fresh process."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from studies._runner import Items
from studies._runner.render import table

ROOT = Path(__file__).resolve().parents[2]
_SCRIPTS = {"timeseries": "examples/timeseries/train.py"}


def resolve(spec: dict[str, Any], protocol: dict[str, Any]) -> Items:
    """``{"recipe": "text_lm", "part": "test"}``: the recipe data module's own split of that part."""
    return Items.of(spec, item=[f"{spec['recipe']}:{spec['part']}"])


def run(candidate: dict[str, Any], seed: int, train: Items, evaluate: Any, budget: dict[str, Any]) -> Any:
    from studies._graphs.splits import fit_split

    recipe = train.payload["recipe"]
    cmd = [_SCRIPTS.get(recipe, f"recipes/{recipe}.py"), "fit", f"--seed_everything={seed}"]
    cmd += ["--config", candidate["config"]] if candidate["config"] else []
    out = fit_split(cmd, ROOT / "runs" / "studies" / f"{recipe}_{seed}")
    metric = budget.get("metric", "acc")
    return {name: {metric: out["metrics"][f"test_{metric}"]} for name in evaluate}, out


def _value(metric: str, xs: list[float]) -> str:
    scale, unit, digits = {"acc": (100, "%", 2), "der": (100, "%", 2), "loss": (1, " nats/char", 3)}[metric]
    xs = [scale * x for x in xs]
    mean = f"{statistics.fmean(xs):.{digits}f}"
    spread = f" ± {statistics.stdev(xs):.{digits}f}" if len(xs) > 1 else ""
    return f"{mean}{spread}{unit} ({len(xs)} seed{'s' if len(xs) > 1 else ''})"


def _groups(view: Any) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in view.records("test"):
        out.setdefault((r["split"], r["candidate"]), []).append(r)
    return out


def render(view: Any) -> list[str]:
    recipes = view.protocol.data["recipes"]
    rows = []
    for (recipe, cand), recs in _groups(view).items():
        metric = recipes[recipe]["metric"]
        values = [next(iter(r["scores"].values()))[metric] for r in recs]
        rows.append((f"`{recipe}`", cand, metric, _value(metric, values),
                     "; ".join(f"`{r['command']}`" for r in recs[:1])))
    return table(["recipe", "config", "metric", "test (mean ± std over seeds)", "command"], rows)


def summary(view: Any) -> list[dict[str, Any]]:
    recipes = view.protocol.data["recipes"]
    out = []
    for (recipe, cand), recs in _groups(view).items():
        r = recipes[recipe]
        what = {"acc": "accuracy", "der": "digit error rate", "loss": "test loss"}[r["metric"]]
        label = "the default config" if cand == "default" else f"`{recipe}_{cand}.yaml`"
        out.append({"task": r["task"], "dataset": r["dataset"], "split": r["split_protocol"],
                    "metric": f"{what}, {label}",
                    "result": _value(r["metric"], [next(iter(x["scores"].values()))[r["metric"]] for x in recs]),
                    "anchors": r["anchors"], "order": r["order"]})
    return out
