"""``python -m studies rnn_attention measure PART[,PART...] [key=value ...]`` (:data:`OPTIONS`), each part kept in the
store's ``detail`` with its run; ``page.md`` writes docs/rnn.md from them.

- ``quality``: the character LM and POS recipes, attention default and LSTM config, trained side by side (one core
  each) for the same time (``quality=lm,pos``; about 30 and 50 min); their runs are also the study's test records.
- ``longrange``: a recall task whose answer lies d tokens back; accuracy against d of an LSTM, causal attention and
  ``Window(w, 0)`` attention, each trained once on all distances.
- ``parallel``, ``streaming``, ``generation``: the cost of training and reading a sequence, measured by
  :mod:`benchmarks.rnn_costs`.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path
from typing import Any

import torch

from benchmarks import rnn_costs
from benchmarks._recipe_runs import run_fits_side_by_side
from studies._runner.stats import machine

STUDY_CONFIGS = Path(__file__).with_name("configs")  # the LSTM overlays of the recipes
QUALITY = {"lm": ("text_lm", "text_lm_lstm.yaml", "test_loss", True), "pos": ("text_pos", "text_pos_lstm.yaml",
                                                                               "test_acc", False)}
KEYS, VALUES, NOISE = 8, 8, 16  # the recall task's token ids: noise, a store per (key, value), a query per key
STORE0, QUERY0 = NOISE, NOISE + KEYS * VALUES


def _run_summary(run_dir: Path) -> dict[str, float]:
    """Steps trained, best validation metrics and encoder parameters of a finished recipe run."""
    import csv

    (metrics_csv,) = run_dir.parent.glob("**/csv/**/metrics.csv")  # the CSVLogger's, beside the run
    rows = list(csv.DictReader(metrics_csv.open()))
    out = {"steps": float(max([int(r["step"]) for r in rows if r.get("step")], default=0))}
    for key, best in (("val_loss", min), ("val_acc", max)):
        if values := [float(r[key]) for r in rows if r.get(key)]:
            out[f"best_{key}"] = best(values)
    (ckpt,) = run_dir.parent.glob("**/last.ckpt")
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    return {**out, "encoder_parameters": float(sum(t.numel() for k, t in state.items() if k.startswith("encoder.")))}


def quality(opts: argparse.Namespace) -> dict[str, Any]:
    rerun = {QUALITY[name][0] for name in opts.quality}
    rows = [r for r in opts.detail.get("quality", {}).get("rows", []) if r["recipe"] not in rerun]
    for recipe, config, metric, lower in (QUALITY[name] for name in opts.quality):
        lift = ["--trainer.max_time=null"]  # other load on the machine slows both without cutting either short
        jobs = [(recipe, lift), (recipe, [f"--config={STUDY_CONFIGS / config}", *lift])]
        for label, r in zip(("attention (default)", f"LSTM ({config})"), run_fits_side_by_side(jobs, seed=opts.seed,
                                                                                               collect=_run_summary)):
            rows.append({"recipe": recipe, "encoder": label, "metric": metric, "lower_is_better": lower, **r,
                         "run": f"{machine()}, {opts.command}"})
    return {"rows": rows}


def recall_batch(batch: int, length: int, queries: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Sequences of noise in which every key is stored once with a random value (one token per (key, value)) at a
    random position, and up to ``queries`` later tokens ask a stored key's value, each at a distance drawn
    log-uniformly from 1 to ``length`` (queries past the end or on a taken position are dropped). Returns tokens,
    targets (-100 except at queries) and distances (query position minus its store's; 0 except at queries)."""
    tokens = torch.randint(0, NOISE, (batch, length), generator=generator)
    targets, distance = torch.full((batch, length), -100), torch.zeros(batch, length, dtype=torch.long)
    for b in range(batch):
        stores = torch.randperm(length - 1, generator=generator)[:KEYS]
        values = torch.randint(0, VALUES, (KEYS,), generator=generator)
        tokens[b, stores] = STORE0 + torch.arange(KEYS) * VALUES + values
        keys = torch.randint(0, KEYS, (queries,), generator=generator).tolist()
        gaps = torch.exp(torch.rand(queries, generator=generator) * torch.log(torch.tensor(float(length))))
        for key, gap in zip(keys, gaps.long().clamp(min=1).tolist()):
            t = int(stores[key]) + gap
            if t < length and targets[b, t] < 0 and tokens[b, t] < STORE0:
                tokens[b, t], targets[b, t], distance[b, t] = QUERY0 + key, int(values[key]), gap
    return tokens, targets, distance


def longrange(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.masks import Causal, Window

    width, length, window, steps = 64, opts.recall_length, opts.recall_window, opts.recall_steps
    encoders = {"LSTM": (lambda: rnn_costs.lstm(width, 2, width), Causal()),
                "attention, Causal()": (lambda: rnn_costs.attention(width, 4, 2, 2 * width), Causal()),
                f"attention, Window({window}, 0)": (lambda: rnn_costs.attention(width, 4, 2, 2 * width),
                                                    Window(window, 0))}
    tokens, targets, distance = recall_batch(opts.recall_test, length, 24, torch.Generator().manual_seed(10_000 +
                                                                                                        opts.seed))
    edges = sorted({e for e in [0, 16, 32, 64, 128, 256, 512, 1024, length] if e <= length})
    models = {}
    for name, (build, mask) in encoders.items():
        torch.manual_seed(opts.seed)
        encoder = build()
        embed, head = torch.nn.Embedding(QUERY0 + KEYS, width), torch.nn.Linear(width, VALUES)
        model = torch.nn.ModuleList([embed, encoder, head])
        optim = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.OneCycleLR(optim, max_lr=3e-3, total_steps=steps, pct_start=0.1)
        gen = torch.Generator().manual_seed(opts.seed)
        for _ in range(steps):
            x, y, _ = recall_batch(32, length, 24, gen)
            loss = torch.nn.functional.cross_entropy(head(encoder(embed(x), mask)).flatten(0, 1), y.flatten())
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
        with torch.no_grad():
            model.eval()
            pred = torch.cat([head(encoder(embed(t), mask)).argmax(-1) for t in tokens.split(64)])
        accuracy = []
        for lo, hi in itertools.pairwise(edges):
            sel = (targets >= 0) & (distance > lo) & (distance <= hi)
            n = int(sel.sum())
            accuracy.append({"lo": lo, "hi": hi, "n": n, "acc": float((pred[sel] == targets[sel]).float().mean())
                             if n else None})
        models[name] = {"accuracy": accuracy, "parameters": sum(p.numel() for p in model.parameters())}
    return {"bins": edges, "models": models, "length": length, "steps": steps, "window": window, "layers": 2,
            "chance": 1 / VALUES}


def figures(detail: dict[str, Any]) -> dict[str, Any]:
    """docs/rnn.md's figures (matplotlib) of the parts stored."""
    out = rnn_costs.figures(detail)
    if "longrange" in detail:
        part = detail["longrange"]
        curves = {n: [(a["hi"], 100 * a["acc"]) for a in m["accuracy"] if a["acc"] is not None]
                  for n, m in part["models"].items()}
        out["rnn_longrange"] = rnn_costs.plot([(curves, "distance d (upper edge of the bin)", "recall accuracy (%)")],
                                              yscale="linear", ylim=(0, 102), hlines={"chance": 100 * part["chance"]},
                                              vlines={"window reach": part["layers"] * part["window"]})
    return out


PARTS = {"quality": quality, "longrange": longrange, **rnn_costs.PARTS}
OPTIONS: dict[str, Any] = {"quality": ["lm", "pos"], "seed": 0, "recall_length": 512, "recall_window": 32,
                           "recall_steps": 1500, "recall_test": 512, **rnn_costs.OPTIONS}


def _stored(name: str) -> Any:
    def run(opts: argparse.Namespace) -> dict[str, Any]:  # a device's other than the CPU apart
        return {name if opts.device == "cpu" else f"{name}_{opts.device}": PARTS[name](opts)}

    return run


MEASURE = {name: _stored(name) for name in PARTS}
