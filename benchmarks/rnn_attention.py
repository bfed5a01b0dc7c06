"""Self-attention against recurrent networks, measured: ``python -m benchmarks.rnn_attention``.

Parts (``--parts``, default all but ``quality``):

- ``parallel``: training throughput and time per step against sequence length, LSTM vs causal
  attention encoder of about the same parameter count.
- ``longrange``: a recall task whose answer lies d tokens back; accuracy against d for an LSTM, full
  causal attention and ``Window(w, 0)`` attention, each trained once on all distances.
- ``streaming``: the cost of reading one more token, and the state kept for it: the LSTM's hidden
  state, causal attention's growing key/value cache, ``Window``'s bounded one.
- ``generation``: tokens per second of the character LM sampled with and without the key/value cache.
- ``quality``: the character LM and POS recipes, attention default and LSTM config, trained side by
  side (one core each) under the same wall-clock budget (``--quality lm,pos``; about 20 and 30 min).

Each part stores its results in ``benchmarks/results/rnn_attention.json`` (with the command, machine
and time of its run); the page ``docs/rnn.md`` is then rendered from the stored results, so every
table and plot on it comes from one run of its part. ``--no-write`` only prints.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks._measure import machine_line
from benchmarks._recipe_runs import RECIPES, run_fits_side_by_side

ROOT = Path(__file__).resolve().parent.parent
STORE = Path(__file__).with_name("results") / "rnn_attention.json"
PAGE = ROOT / "docs" / "rnn.md"

Part = Callable[[argparse.Namespace], dict[str, Any]]


# ---------------------------------------------------------------------------------------------------
# quality at equal budget: the recipes, side by side


#: recipe -> (label, LSTM config, metric reported, lower is better)
QUALITY = {
    "lm": ("text_lm", "text_lm_lstm.yaml", "test_loss", True),
    "pos": ("text_pos", "text_pos_lstm.yaml", "test_acc", False),
}


def _run_summary(run_dir: Path) -> dict[str, float]:
    """Steps trained, last validation metrics and encoder parameters of a finished recipe run."""
    import csv

    out: dict[str, float] = {}
    (metrics_csv,) = run_dir.parent.glob("**/csv/**/metrics.csv")  # the CSVLogger's, beside the run
    rows = list(csv.DictReader(metrics_csv.open()))
    steps = [int(r["step"]) for r in rows if r.get("step")]
    out["steps"] = float(max(steps)) if steps else 0.0  # validation and test rows log the steps taken
    for key in ("val_loss", "val_acc"):
        values = [float(r[key]) for r in rows if r.get(key)]
        if values:
            out[f"best_{key}"] = min(values) if key == "val_loss" else max(values)
    (ckpt,) = run_dir.parent.glob("**/last.ckpt")
    state = torch.load(ckpt, map_location="cpu", weights_only=True)["state_dict"]
    out["encoder_parameters"] = float(sum(t.numel() for k, t in state.items() if k.startswith("encoder.")))
    return out


def quality(opts: argparse.Namespace) -> dict[str, Any]:
    names = opts.quality.split(",")
    rerun = {QUALITY[name][0] for name in names}
    kept = [r for r in load_store().get("quality", {}).get("rows", []) if r["recipe"] not in rerun]
    rows: list[dict[str, Any]] = []
    for name in names:
        recipe, config, metric, lower = QUALITY[name]
        print(f"== quality: {recipe}, attention default and {config}, side by side", flush=True)
        # the budgets are the configs' steps (sized by measured step times); the time caps are lifted
        # so that other load on the machine slows both runs without cutting either schedule short
        lift = ["--trainer.max_time=null"]
        jobs = [(recipe, lift), (recipe, [f"--config={RECIPES / 'configs' / config}", *lift])]
        attn, lstm = run_fits_side_by_side(jobs, seed=opts.seed, collect=_run_summary)
        when = f"{machine_line()}, {opts.command}"
        for label, r in (("attention (default)", attn), (f"LSTM ({config})", lstm)):
            row = {"recipe": recipe, "encoder": label, "metric": metric, "lower_is_better": lower, **r, "run": when}
            rows.append(row)
            print(f"   {label}: {json.dumps({k: round(v, 4) for k, v in r.items()})}", flush=True)
    return {"rows": kept + rows}


# ---------------------------------------------------------------------------------------------------
# the models compared: the character LM's encoder and an LSTM of about its parameter count

WIDTH, HEADS, LAYERS, FFN = 192, 6, 4, 768  # recipes/configs/text_lm.yaml
LSTM_LAYERS, LSTM_HIDDEN = 2, 344  # recipes/configs/text_lm_lstm.yaml


def _attention_encoder(width: int = WIDTH, heads: int = HEADS, layers: int = LAYERS, ffn: int = FFN) -> Any:
    from attnmm.attention import Encoder, RotaryPE

    return Encoder(width, heads, layers, ffn, dropout=0.0, rotary=RotaryPE(width // heads))


def _lstm_encoder(width: int = WIDTH, layers: int = LSTM_LAYERS, hidden: int = LSTM_HIDDEN) -> Any:
    from attnmm.nn import RecurrentEncoder

    return RecurrentEncoder(width, layers, hidden_size=hidden)


def _parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---------------------------------------------------------------------------------------------------
# parallel training: time per step against sequence length


def parallel(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.masks import Causal
    from benchmarks._measure import alternate

    device = torch.device(opts.device)
    torch.manual_seed(opts.seed)
    models = {"attention": _attention_encoder().to(device), "lstm": _lstm_encoder().to(device)}
    tokens = opts.tokens_per_step
    rows = []
    for threads in sorted({1, opts.threads}) if device.type == "cpu" else [opts.threads]:
        torch.set_num_threads(threads)
        for length in opts.lengths:
            batch = max(1, tokens // length)
            x = torch.randn(batch, length, WIDTH, device=device, requires_grad=True)
            grad = torch.randn(batch, length, WIDTH, device=device)

            def step(model: torch.nn.Module, x: torch.Tensor = x, grad: torch.Tensor = grad) -> Callable[[], None]:
                def run() -> None:
                    model.zero_grad(set_to_none=True)
                    model(x, Causal()).backward(grad)
                    if device.type == "cuda":
                        torch.cuda.synchronize()

                return run

            t_lstm, t_attn = alternate(step(models["lstm"]), step(models["attention"]), rounds=opts.rounds)
            assert t_lstm is not None
            row = {"threads": threads, "length": length, "batch": batch, "lstm_s": t_lstm, "attention_s": t_attn}
            rows.append(row)
            print(f"   {threads} thread(s), L={length:5d}, B={batch:3d}: LSTM {t_lstm:.3f} s, attention {t_attn:.3f} s",
                  flush=True)
    torch.set_num_threads(opts.threads)
    params = {name: _parameters(m) for name, m in models.items()}
    return {"rows": rows, "parameters": params, "tokens_per_step": tokens, "device": device.type}


# ---------------------------------------------------------------------------------------------------
# long-range dependence: associative recall at distance d

RECALL_KEYS, RECALL_VALUES, RECALL_NOISE = 8, 8, 16
NOISE0 = 0  # token ids: noise, then a store per (key, value), then a query per key
STORE0 = RECALL_NOISE
QUERY0 = STORE0 + RECALL_KEYS * RECALL_VALUES
RECALL_VOCAB = QUERY0 + RECALL_KEYS


def recall_batch(batch: int, length: int, queries: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Sequences of noise in which every key is stored once with a random value (one token per
    (key, value)) at a random position, and up to ``queries`` later tokens ask a stored key's value,
    each at a distance drawn log-uniformly from 1 to ``length`` (so that short and long distances are
    equally common on a log scale; queries falling past the end or on a taken position are dropped).

    Returns tokens (B, L), targets (B, L) (-100 except at queries) and distances (B, L) (query
    position minus the position of the store it asks about; 0 except at queries)."""
    tokens = torch.randint(NOISE0, NOISE0 + RECALL_NOISE, (batch, length), generator=generator)
    targets = torch.full((batch, length), -100)
    distance = torch.zeros(batch, length, dtype=torch.long)
    log_max = torch.log(torch.tensor(float(length)))
    for b in range(batch):
        stores = torch.randperm(length - 1, generator=generator)[:RECALL_KEYS]
        values = torch.randint(0, RECALL_VALUES, (RECALL_KEYS,), generator=generator)
        tokens[b, stores] = STORE0 + torch.arange(RECALL_KEYS) * RECALL_VALUES + values
        keys = torch.randint(0, RECALL_KEYS, (queries,), generator=generator)
        gaps = torch.exp(torch.rand(queries, generator=generator) * log_max).long().clamp(min=1)
        for key, gap in zip(keys.tolist(), gaps.tolist()):
            t = int(stores[key]) + gap
            if t >= length or targets[b, t] >= 0 or tokens[b, t] >= STORE0:
                continue
            tokens[b, t] = QUERY0 + key
            targets[b, t] = int(values[key])
            distance[b, t] = gap
    return tokens, targets, distance


class RecallModel(torch.nn.Module):
    """Embedding -> encoder under ``mask`` -> value logits."""

    def __init__(self, encoder: torch.nn.Module, mask: Any, width: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(RECALL_VOCAB, width)
        self.encoder, self.mask = encoder, mask
        self.head = torch.nn.Linear(width, RECALL_VALUES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens), self.mask))


def longrange(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.masks import Causal, Window

    width, length = 64, opts.recall_length
    window = opts.recall_window
    builders = {
        "LSTM": lambda: RecallModel(_lstm_encoder(width, 2, width), Causal(), width),
        "attention, Causal()": lambda: RecallModel(_attention_encoder(width, 4, 2, 2 * width), Causal(), width),
        f"attention, Window({window}, 0)": lambda: RecallModel(
            _attention_encoder(width, 4, 2, 2 * width), Window(window, 0), width
        ),
    }
    test_gen = torch.Generator().manual_seed(10_000 + opts.seed)
    test = recall_batch(opts.recall_test, length, 24, test_gen)
    edges = [0, 16, 32, 64, 128, 256, 512, 1024, length]
    edges = sorted({e for e in edges if e <= length})
    results: dict[str, Any] = {"bins": edges, "models": {}}
    for name, build in builders.items():
        torch.manual_seed(opts.seed)
        model = build()
        optim = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.OneCycleLR(optim, max_lr=3e-3, total_steps=opts.recall_steps, pct_start=0.1)
        gen = torch.Generator().manual_seed(opts.seed)
        started = time.perf_counter()
        for step in range(opts.recall_steps):
            tokens, targets, _ = recall_batch(32, length, 24, gen)
            loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), targets.flatten())
            optim.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optim.step()
            sched.step()
            if step % 250 == 0:
                print(f"   {name}: step {step}, loss {loss.item():.3f}", flush=True)
        seconds = time.perf_counter() - started
        model.eval()
        with torch.no_grad():
            tokens, targets, distance = test
            pred = torch.cat([model(t).argmax(-1) for t in tokens.split(64)])
        asked = targets >= 0
        accuracy = []
        for lo, hi in itertools.pairwise(edges):
            sel = asked & (distance > lo) & (distance <= hi)
            n = int(sel.sum())
            acc = float((pred[sel] == targets[sel]).float().mean()) if n else None
            accuracy.append({"lo": lo, "hi": hi, "n": n, "acc": acc})
        results["models"][name] = {"accuracy": accuracy, "parameters": _parameters(model), "train_seconds": seconds}
        print(f"   {name}: " + ", ".join(f"({a['lo']}, {a['hi']}]: {a['acc']}" for a in accuracy), flush=True)
    results.update(length=length, steps=opts.recall_steps, window=window, layers=2, chance=1 / RECALL_VALUES)
    return results


# ---------------------------------------------------------------------------------------------------
# streaming cost: one more token after t


def streaming(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.attention import IncrementalState
    from attnmm.masks import Causal, Window

    torch.manual_seed(opts.seed)
    window = opts.stream_window
    models = {
        "LSTM": (_lstm_encoder().eval(), Causal()),
        "attention, Causal()": (_attention_encoder().eval(), Causal()),
        f"attention, Window({window}, 0)": (_attention_encoder().eval(), Window(window, 0)),
    }
    rows = []
    with torch.no_grad():
        for t in opts.stream_positions:
            prefix = torch.randn(1, t, WIDTH)
            steps = torch.randn(1, opts.stream_steps, WIDTH)
            for name, (model, mask) in models.items():
                state = IncrementalState()
                model(prefix, mask, state=state)
                state.advance(t)
                times = []
                for i in range(opts.stream_steps):
                    start = time.perf_counter()
                    model(steps[:, i : i + 1], mask, state=state)
                    times.append(time.perf_counter() - start)
                    state.advance(1)
                times.sort()
                row = {"model": name, "position": t, "step_ms": 1e3 * times[len(times) // 2],
                       "state_bytes": state.num_bytes()}
                rows.append(row)
                print(f"   t={t:6d} {name}: {row['step_ms']:.2f} ms/token, state {row['state_bytes'] / 2**20:.2f} MB",
                      flush=True)
    return {"rows": rows, "window": window}


# ---------------------------------------------------------------------------------------------------
# generation from the character LM, with and without the cache


def _lm_task(config: str | None) -> Any:
    import importlib.util

    # the recipe's own CLI: its default config and links (the widths and classes written once)
    spec = importlib.util.spec_from_file_location("text_lm_recipe", RECIPES / "text_lm.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    args = ([f"--config={RECIPES / 'configs' / config}"] if config else []) + ["--trainer.logger=false"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        cli = recipe.main(args, run=False)
    return cli.model.eval()


def generation(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.lightning.generate import generate

    rows = []
    context, n = 256, opts.generate_tokens
    prompt = torch.randint(2, 67, (1, 6), generator=torch.Generator().manual_seed(opts.seed))
    for name, config in (("attention (text_lm.yaml)", None), ("LSTM (text_lm_lstm.yaml)", "text_lm_lstm.yaml")):
        torch.manual_seed(opts.seed)
        model = _lm_task(config)
        outputs = {}
        for cache in (False, True):
            generate(model, prompt, 8, context, temperature=0.0, cache=cache)  # warm-up
            start = time.perf_counter()
            outputs[cache] = generate(model, prompt, n, context, temperature=0.0, cache=cache)
            seconds = time.perf_counter() - start
            rows.append({"model": name, "cache": cache, "tokens": n, "seconds": seconds, "tokens_per_s": n / seconds})
            print(f"   {name}, cache={cache}: {n / seconds:.1f} tokens/s", flush=True)
        fits = context - prompt.size(1)  # the tokens generated while everything fits in the context
        same = bool(torch.equal(outputs[True][:, : prompt.size(1) + fits], outputs[False][:, : prompt.size(1) + fits]))
        rows[-1]["equal_within_context"] = same
    return {"rows": rows, "context": context, "prompt_tokens": int(prompt.size(1))}


PARTS: dict[str, Part] = {
    "parallel": parallel,
    "longrange": longrange,
    "streaming": streaming,
    "generation": generation,
    "quality": quality,
}


# ---------------------------------------------------------------------------------------------------
# the store and the page


def load_store() -> dict[str, Any]:
    return json.loads(STORE.read_text()) if STORE.exists() else {}


# ---------------------------------------------------------------------------------------------------
# the page: tables, statements derived from the numbers, and the figures docs/make_figures.py draws

INTRO = """# Self-attention and RNNs

<!-- Written by `python -m benchmarks.rnn_attention` from the results it stores in
benchmarks/results/rnn_attention.json; edit the module, not this page. -->

Three claims separate self-attention from recurrent networks: a recurrent network cannot be trained
in parallel over the positions of a sequence, because step t waits for step t - 1; what it knows of
early tokens must survive in a fixed-size state, so it fades over a long sequence; and attention
reaches any allowed position in one step, paying for it with memory that grows with what it may
attend. This page measures each claim on attnmm's own models and recipes, on the machine named in
each section, so that you can see where each architecture wins. Every table and figure comes from
one run of one part of `python -m benchmarks.rnn_attention` (the command is given with it).

The recurrent baseline is `attnmm.nn.RecurrentEncoder` (LSTM or GRU, uni- or bidirectional). It
has the call signature of `attnmm.attention.Encoder`, so a recipe swaps it in by `class_path`, with
the same adapter and head; each config below sits beside its recipe's default:

| recipe | recurrent config | encoder |
|---|---|---|
| character LM (`recipes/text_lm.py`) | `recipes/configs/text_lm_lstm.yaml` | 2-layer LSTM |
| POS tagging (`recipes/text_pos.py`) | `recipes/configs/text_pos_lstm.yaml` | 2-layer bidirectional LSTM |
| speech (`recipes/speech_truncated.py`) | `recipes/configs/speech_truncated_lstm.yaml` | 2-layer bidirectional LSTM |

```bash
python recipes/text_lm.py fit --config recipes/configs/text_lm_lstm.yaml
```

A recurrence reads every earlier position (every position, when bidirectional), so the encoder
accepts the masks whose allowed sets contain that: `Full()`, `Causal()` (unidirectional) and
their intersection with the batch's `Padding`; it refuses a `Window` or `Chunk` by name rather than
ignore it. Both encoders read a causal sequence incrementally through an `IncrementalState`:

```python
import torch
from attnmm.attention import Encoder, IncrementalState
from attnmm.masks import Causal, Window
from attnmm.nn import RecurrentEncoder

x = torch.randn(1, 50, 32)
for encoder, mask in [(RecurrentEncoder(32, 2), Causal()), (Encoder(32, 4, 2, 64), Window(8, 0))]:
    encoder.eval()
    state = IncrementalState()
    steps = []
    for t in range(50):  # one token at a time
        steps.append(encoder(x[:, t : t + 1], mask, state=state))
        state.advance(1)
    assert torch.allclose(torch.cat(steps, 1), encoder(x, mask), atol=1e-5)
    print(type(encoder).__name__, "keeps", state.num_bytes(), "bytes after 50 tokens")
```

```text
RecurrentEncoder keeps 512 bytes after 50 tokens
Encoder keeps 4096 bytes after 50 tokens
```

The LSTM's state is its hidden and cell vectors, whatever the length read; the window's cache holds
the keys and values of the last 8 tokens in each layer.
"""


def _run_line(part: dict[str, Any]) -> str:
    run = part["run"]
    return f"`{run['command']}` ({run['machine']}, {run['minutes']} min)."


def _fmt_s(t: float) -> str:
    return f"{1e3 * t:.0f} ms" if t < 10 else f"{t:.1f} s"


def _parallel_section(part: dict[str, Any]) -> list[str]:
    rows = part["rows"]
    threads = sorted({r["threads"] for r in rows})
    params = part["parameters"]
    on_gpu = part.get("device", "cpu") != "cpu"
    out = [
        "## Parallel training" + (" on a GPU" if on_gpu else ""),
        "",
        f"Time of one training step (forward and backward) of the character LM's encoder, causal "
        f"attention ({params['attention']:,} parameters: {LAYERS} pre-norm layers of width {WIDTH}, rotary "
        f"positions, fused SDPA) against a {LSTM_LAYERS}-layer LSTM ({params['lstm']:,} parameters, "
        f"{LSTM_HIDDEN} state channels), on {part['tokens_per_step']:,} tokens per step "
        "(batch x length), fp32, fastest of alternated rounds. Run: " + _run_line(part),
        "",
        "| threads | length L | batch | LSTM step | attention step | LSTM tokens/s | attention tokens/s "
        "| LSTM time / attention time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["batch"] * r["length"]
        out.append(
            f"| {r['threads']} | {r['length']:,} | {r['batch']} | {_fmt_s(r['lstm_s'])} | {_fmt_s(r['attention_s'])} "
            f"| {n / r['lstm_s']:,.0f} | {n / r['attention_s']:,.0f} | {r['lstm_s'] / r['attention_s']:.2f}x |"
        )
    if on_gpu:
        return [*out, ""]
    out += ["", "![tokens per second against sequence length](figures/rnn_parallel.png)", ""]
    top = max(threads)
    at = {(r["threads"], r["length"]): r for r in rows}
    lengths = sorted({r["length"] for r in rows})
    faster = [L for L in lengths if at[(top, L)]["attention_s"] < at[(top, L)]["lstm_s"]]
    slower = [L for L in lengths if L not in faster]
    lines = []
    if faster:
        lines.append(
            f"On {top} threads, causal attention trains faster than the LSTM at L = "
            f"{', '.join(f'{L:,}' for L in faster)}"
            + (f", the LSTM at L = {', '.join(f'{L:,}' for L in slower)}." if slower else " (every length measured).")
        )
    else:
        lines.append(f"On {top} threads, the LSTM trains faster than causal attention at every length measured.")
    if len(threads) > 1:
        lo = min(threads)

        def speedup(model: str) -> float:
            ratios = sorted(at[(lo, L)][f"{model}_s"] / at[(top, L)][f"{model}_s"] for L in lengths)
            return ratios[len(ratios) // 2]

        s_attn, s_lstm = speedup("attention"), speedup("lstm")
        why = (
            "attention computes all positions of a layer in a few large products, while the LSTM's recurrent "
            "products cover one time step at a time and leave the cores less to share"
            if s_attn > s_lstm
            else "on this machine the LSTM's per-step products are large enough to share out as well"
        )
        lines.append(
            f"From {lo} to {top} threads, attention's step gets {s_attn:.2f}x faster and the LSTM's "
            f"{s_lstm:.2f}x (medians over the lengths): {why}."
        )
        if not faster:
            lines.append(
                f"With {top} cores, what attention gains from parallel positions does not make up for its "
                "higher cost per token here."
            )
    longest = max(lengths)
    growth = {m: at[(top, longest)][f"{m}_s"] / at[(top, min(lengths))][f"{m}_s"] for m in ("lstm", "attention")}
    lines.append(
        f"At a fixed number of tokens per step, going from L = {min(lengths):,} to L = {longest:,} changes the "
        f"LSTM's step time by {growth['lstm']:.2f}x (the same work, in longer chains) and attention's by "
        f"{growth['attention']:.2f}x (its score matrix grows with L)."
    )
    return [*out, " ".join(lines), ""]


def _quality_section(part: dict[str, Any]) -> list[str]:
    out = [
        "## Quality at equal budget",
        "",
        "Each recipe's default (attention) and its LSTM config, trained at the same time on one core "
        "each (one PyTorch thread), with the same data, seed and optimiser and the same training time on "
        "a quiet core: the default's steps, and as many LSTM steps as take that long by the step times "
        "measured one after the other (the configs' comments give them). The runs lift the configs' time "
        "caps, so that other load on the machine slows both without cutting either schedule short; the "
        "wall times below are those of the shared machine. Each pair's run is named under the table.",
        "",
        "| recipe | encoder | encoder parameters | steps | wall time | best validation | test |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in part["rows"]:
        metric = r["metric"]
        val = r.get("best_val_loss") if metric == "test_loss" else r.get("best_val_acc")
        shown = (lambda v: f"{v:.3f} nats/char") if metric == "test_loss" else (lambda v: f"{100 * v:.2f}%")
        out.append(
            f"| {r['recipe']} | {r['encoder']} | {int(r['encoder_parameters']):,} | {int(r['steps']):,} "
            f"| {r['seconds'] / 60:.1f} min | {shown(val) if val is not None else '—'} | {shown(r[metric])} |"
        )
    lines = []
    by_recipe: dict[str, list[dict[str, Any]]] = {}
    for r in part["rows"]:
        by_recipe.setdefault(r["recipe"], []).append(r)
    for recipe, (attn, lstm) in ((k, v) for k, v in by_recipe.items() if len(v) == 2):
        metric, lower = attn["metric"], attn["lower_is_better"]
        a, b = attn[metric], lstm[metric]
        attn_wins = a < b if lower else a > b
        diff = abs(a - b) if lower else 100 * abs(a - b)
        unit = "nats/char" if lower else "points"
        lines.append(
            f"{recipe}: {'attention' if attn_wins else 'the LSTM'} is better by {diff:.3f} {unit} "
            "on the recipe's test set "
            f"(attention {a:.4f}, LSTM {b:.4f}), "
            f"after {int(attn['steps']):,} attention and {int(lstm['steps']):,} LSTM steps."
        )
    runs = list(dict.fromkeys(f"{r['recipe']}: {r['run']}" for r in part["rows"]))
    return [*out, "", " ".join(lines), "", "Runs: " + "; ".join(runs) + ".", ""]


def _longrange_section(part: dict[str, Any]) -> list[str]:
    models = part["models"]
    names = list(models)
    first = models[names[0]]["accuracy"]
    horizon = part["layers"] * part["window"]
    out = [
        "## Long-range dependence",
        "",
        f"An associative-recall task: sequences of {part['length']} tokens of noise in which each of "
        f"{RECALL_KEYS} keys is stored once with one of {RECALL_VALUES} values (one token per key and value), "
        "at random positions; later query tokens name a stored key, and the model must answer its value. "
        "The distance d of a query is how far back its answer was stored, drawn log-uniformly, so that "
        "every bin below holds about as many training queries. Each model (2 layers of width 64, "
        f"about the same parameter count) is trained once on all distances for {part['steps']:,} steps of 32 "
        f"sequences; the table gives its test accuracy per distance (chance: {100 * part['chance']:.1f}%). "
        f"Two `Window({part['window']}, 0)` layers reach at most {horizon} tokens back. Run: " + _run_line(part),
        "",
        "| distance d | " + " | ".join(f"{n} ({models[n]['parameters']:,} parameters)" for n in names) + " |",
        "|---|" + "---:|" * len(names),
    ]
    for i, b in enumerate(first):
        cells = []
        for n in names:
            acc = models[n]["accuracy"][i]["acc"]
            cells.append("—" if acc is None else f"{100 * acc:.1f}%")
        out.append(f"| {b['lo'] + 1}-{b['hi']} ({b['n']} queries) | " + " | ".join(cells) + " |")
    out += ["", "![recall accuracy against distance](figures/rnn_longrange.png)", ""]

    def acc_at(name: str, i: int) -> float:
        return models[name]["accuracy"][i]["acc"] or 0.0

    lines = []
    for n in names:
        accs = [acc_at(n, i) for i in range(len(first))]
        lines.append(
            f"{n}: {100 * accs[0]:.1f}% for d <= {first[0]['hi']}, {100 * accs[-1]:.1f}% for the farthest "
            f"queries (d > {first[-1]['lo']})."
        )
    window_name = next((n for n in names if n.startswith("attention, Window")), None)
    if window_name is not None:
        beyond = [i for i, b in enumerate(first) if b["lo"] >= horizon]
        if beyond:
            mean_beyond = sum(acc_at(window_name, i) for i in beyond) / len(beyond)
            lines.append(
                f"Beyond its {horizon}-token reach the window scores {100 * mean_beyond:.1f}% on average: a "
                "hard horizon, past which the answer is invisible whatever the training."
            )
    return [*out, " ".join(lines), ""]


def _streaming_section(part: dict[str, Any]) -> list[str]:
    rows = part["rows"]
    names = list(dict.fromkeys(r["model"] for r in rows))
    positions = sorted({r["position"] for r in rows})
    at = {(r["model"], r["position"]): r for r in rows}
    out = [
        "## Streaming cost",
        "",
        "The cost of reading one more token after t tokens, and the state kept for it, with the character LM's "
        "encoders (width 192, batch 1, fp32, inference): the LSTM carries its hidden and cell states, causal "
        f"attention a key/value cache of every earlier token, `Window({part['window']}, 0)` one of the last "
        f"{part['window']}. Median of consecutive steps. Run: " + _run_line(part),
        "",
        "| t | " + " | ".join([*(f"{n}: ms/token" for n in names), *(f"{n}: state" for n in names)]) + " |",
        "|---:|" + "---:|" * (2 * len(names)),
    ]
    for t in positions:
        ms = " | ".join(f"{at[(n, t)]['step_ms']:.2f}" for n in names)
        mb = " | ".join(_bytes(at[(n, t)]["state_bytes"]) for n in names)
        out.append(f"| {t:,} | {ms} | {mb} |")
    out += ["", "![per-token cost and state against position](figures/rnn_streaming.png)", ""]
    first, last = positions[0], positions[-1]
    lines = []
    for n in names:
        a, b = at[(n, first)], at[(n, last)]
        lines.append(
            f"{n}: {a['step_ms']:.2f} ms and {_bytes(a['state_bytes'])} at t = {first:,}, "
            f"{b['step_ms']:.2f} ms and {_bytes(b['state_bytes'])} at t = {last:,}."
        )
    return [*out, " ".join(lines), ""]


def _bytes(n: float) -> str:
    return f"{n / 2**20:.2f} MB" if n >= 2**20 else f"{n / 2**10:.1f} KB"


def _generation_section(part: dict[str, Any]) -> list[str]:
    out = [
        "## Generation with a key/value cache",
        "",
        f"`attnmm.lightning.generate` samples the character LM one token at a time ({part['prompt_tokens']}-token "
        f"prompt, greedy, context {part['context']}). Without the cache every step re-reads the last "
        f"{part['context']} tokens; with it (the default) the prompt is read once and each step reads one token, "
        "the attention layers keeping their keys and values (the LSTM its state). Weights as initialised "
        "(speed does not depend on them). Run: " + _run_line(part),
        "",
        "| model | cache | tokens | tokens/s | same output within the context |",
        "|---|---|---:|---:|---|",
    ]
    for r in part["rows"]:
        same = "" if "equal_within_context" not in r else ("yes" if r["equal_within_context"] else "**no**")
        cache = "yes" if r["cache"] else "no"
        out.append(f"| {r['model']} | {cache} | {r['tokens']} | {r['tokens_per_s']:.1f} | {same} |")
    speed = {(r["model"], r["cache"]): r["tokens_per_s"] for r in part["rows"]}
    lines = [
        f"{m}: the cache generates {speed[(m, True)] / speed[(m, False)]:.1f}x faster."
        for m in dict.fromkeys(r["model"] for r in part["rows"])
    ]
    return [*out, "", " ".join(lines), ""]


SECTIONS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "parallel": _parallel_section,
    "parallel_cuda": _parallel_section,
    "quality": _quality_section,
    "longrange": _longrange_section,
    "streaming": _streaming_section,
    "generation": _generation_section,
}


def _summary_section(store: dict[str, Any]) -> list[str]:
    """Who wins what, read off the stored numbers."""
    bullets = []
    if "parallel" in store:
        rows = store["parallel"]["rows"]
        top = max(r["threads"] for r in rows)
        sel = [r for r in rows if r["threads"] == top]
        attn = [r["length"] for r in sel if r["attention_s"] < r["lstm_s"]]
        lstm = [r["length"] for r in sel if r["attention_s"] >= r["lstm_s"]]
        where = []
        if attn:
            where.append(f"attention at L = {', '.join(f'{n:,}' for n in attn)}")
        if lstm:
            where.append(f"the LSTM at L = {', '.join(f'{n:,}' for n in lstm)}")
        bullets.append(f"**Training speed** ({top} CPU threads, equal parameters): faster is " + "; ".join(where) + ".")
    if "quality" in store:
        for r_attn, r_lstm in zip(store["quality"]["rows"][::2], store["quality"]["rows"][1::2]):
            metric, lower = r_attn["metric"], r_attn["lower_is_better"]
            a, b = r_attn[metric], r_lstm[metric]
            winner = "attention" if (a < b if lower else a > b) else "the LSTM"
            bullets.append(
                f"**Quality at equal training time**, {r_attn['recipe']}: {winner} "
                f"({metric} {a:.4f} for attention, {b:.4f} for the LSTM)."
            )
    if "longrange" in store:
        models = store["longrange"]["models"]
        far = {n: m["accuracy"][-1]["acc"] or 0.0 for n, m in models.items()}
        near = {n: m["accuracy"][0]["acc"] or 0.0 for n, m in models.items()}
        best = max(far, key=lambda n: far[n])
        bullets.append(
            "**Long-range recall**: at the largest distances " + ", ".join(f"{n} {100 * far[n]:.0f}%" for n in far)
            + " (nearest distances: " + ", ".join(f"{100 * near[n]:.0f}%" for n in near) + f"); best: {best}."
        )
    if "streaming" in store:
        rows = store["streaming"]["rows"]
        last = max(r["position"] for r in rows)
        at_last = {r["model"]: r for r in rows if r["position"] == last}
        cheapest = min(at_last, key=lambda n: at_last[n]["step_ms"])
        smallest = min(at_last, key=lambda n: at_last[n]["state_bytes"])
        bullets.append(
            f"**Streaming** one more token after {last:,}: cheapest {cheapest} "
            f"({at_last[cheapest]['step_ms']:.2f} ms), smallest state {smallest} "
            f"({_bytes(at_last[smallest]['state_bytes'])})."
        )
    if not bullets:
        return []
    return ["## Where each wins, on this machine", "", *(f"- {b}" for b in bullets), ""]


def render_page(store: dict[str, Any]) -> str:
    """docs/rnn.md from the stored results (a part not run yet is named as such)."""
    lines = [INTRO]
    for name, section in SECTIONS.items():
        if name in store:
            lines += section(store[name])
        elif name == "parallel_cuda":
            lines += ["## Parallel training on a GPU", "", "Not measured yet (no GPU was available): "
                      "`python -m benchmarks.rnn_attention --parts parallel --device cuda`.", ""]
        else:
            lines += [f"## {name}", "", f"Not measured yet: `python -m benchmarks.rnn_attention --parts {name}`.", ""]
    lines += _summary_section(store)
    return "\n".join(lines).rstrip() + "\n"


def figures(store: dict[str, Any]) -> dict[str, Any]:
    """The page's figures (matplotlib), by file stem, for the parts stored."""
    from matplotlib.figure import Figure

    out: dict[str, Any] = {}
    if "parallel" in store:
        fig = Figure(figsize=(6.4, 4.0), layout="constrained")
        ax = fig.subplots()
        rows = store["parallel"]["rows"]
        for threads in sorted({r["threads"] for r in rows}):
            sel = [r for r in rows if r["threads"] == threads]
            for model, style in (("attention", "-"), ("lstm", "--")):
                xs = [r["length"] for r in sel]
                ys = [r["batch"] * r["length"] / r[f"{model}_s"] for r in sel]
                label = f"{'causal attention' if model == 'attention' else 'LSTM'}, {threads} thread(s)"
                ax.plot(xs, ys, style, marker="o", label=label)
        ax.set(xscale="log", yscale="log", xlabel="sequence length L", ylabel="training tokens / s")
        ax.legend()
        out["rnn_parallel"] = fig
    if "longrange" in store:
        part = store["longrange"]
        fig = Figure(figsize=(6.4, 4.0), layout="constrained")
        ax = fig.subplots()
        for name, model in part["models"].items():
            accs = [a for a in model["accuracy"] if a["acc"] is not None]
            ax.plot([a["hi"] for a in accs], [100 * a["acc"] for a in accs], marker="o", label=name)
        ax.axhline(100 * part["chance"], color="grey", linestyle=":", label="chance")
        ax.axvline(part["layers"] * part["window"], color="grey", linestyle="--", label="window reach")
        ax.set(xscale="log", xlabel="distance d (upper edge of the bin)", ylabel="recall accuracy (%)", ylim=(0, 102))
        ax.legend()
        out["rnn_longrange"] = fig
    if "streaming" in store:
        rows = store["streaming"]["rows"]
        fig = Figure(figsize=(9.6, 3.8), layout="constrained")
        ax_t, ax_m = fig.subplots(1, 2)
        for name in dict.fromkeys(r["model"] for r in rows):
            sel = [r for r in rows if r["model"] == name]
            ax_t.plot([r["position"] for r in sel], [r["step_ms"] for r in sel], marker="o", label=name)
            ax_m.plot([r["position"] for r in sel], [r["state_bytes"] / 2**20 for r in sel], marker="o", label=name)
        ax_t.set(xscale="log", yscale="log", xlabel="tokens read t", ylabel="ms for token t + 1")
        ax_m.set(xscale="log", yscale="log", xlabel="tokens read t", ylabel="state kept (MB)")
        ax_t.legend()
        out["rnn_streaming"] = fig
    return out


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.rnn_attention", description=__doc__)
    parser.add_argument("--parts", default="parallel,longrange,streaming,generation", help="comma-separated parts")
    parser.add_argument("--quality", default="lm,pos", help="recipes of the quality part: lm, pos")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lengths", type=_ints, default=[64, 128, 256, 512, 1024, 2048, 4096])
    parser.add_argument("--tokens-per-step", type=int, default=8192, help="batch size x length of a parallel step")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per length")
    parser.add_argument("--recall-length", type=int, default=512)
    parser.add_argument("--recall-window", type=int, default=32)
    parser.add_argument("--recall-steps", type=int, default=1500)
    parser.add_argument("--recall-test", type=int, default=512, help="test sequences of the recall task")
    parser.add_argument("--stream-positions", type=_ints, default=[64, 256, 1024, 4096, 16384])
    parser.add_argument("--stream-window", type=int, default=256)
    parser.add_argument("--stream-steps", type=int, default=21)
    parser.add_argument("--generate-tokens", type=int, default=500)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the in-process parts")
    parser.add_argument("--device", default="cpu", help="device of the parallel part (cuda: stored apart)")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render-only", action="store_true", help="render docs/rnn.md from the stored results")
    opts = parser.parse_args(argv)
    store = load_store()
    if not opts.render_only:
        torch.set_num_threads(opts.threads)
        for name in opts.parts.split(","):
            if name not in PARTS:
                parser.error(f"unknown part {name!r}; choose from {sorted(PARTS)}")
            started = time.perf_counter()
            opts.command = " ".join(["python -m benchmarks.rnn_attention", *(sys.argv[1:] if argv is None else argv)])
            result = PARTS[name](opts)
            result["run"] = {
                "command": opts.command,
                "machine": machine_line(),
                "minutes": round((time.perf_counter() - started) / 60, 1),
            }
            store[name if opts.device == "cpu" else f"{name}_{opts.device}"] = result
            if not opts.no_write:
                STORE.parent.mkdir(exist_ok=True)
                STORE.write_text(json.dumps(store, indent=1) + "\n")
    page = render_page(store)
    if opts.no_write:
        print(page)
    else:
        PAGE.write_text(page)
        print(f"wrote {PAGE} (figures: python docs/make_figures.py {' '.join(figures(store))})")


if __name__ == "__main__":
    main()
