"""Self-attention against recurrent networks, measured: ``python -m studies rnn_attention measure PART``.

Parts (``python -m studies rnn_attention measure PART[,PART...] [key=value ...]``, :data:`OPTIONS`):

- ``parallel``: training throughput and time per step against sequence length, LSTM vs causal
  attention encoder of about the same parameter count.
- ``longrange``: a recall task whose answer lies d tokens back; accuracy against d for an LSTM, full
  causal attention and ``Window(w, 0)`` attention, each trained once on all distances.
- ``streaming``: the cost of reading one more token, and the state kept for it: the LSTM's hidden
  state, causal attention's growing key/value cache, ``Window``'s bounded one.
- ``generation``: tokens per second of the character LM sampled with and without the key/value cache.
- ``quality``: the character LM and POS recipes, attention default and LSTM config, trained side by
  side (one core each) under the same wall-clock budget (``quality=lm,pos``; about 20 and 30 min).

Each part stores its results in the ``rnn_attention`` study's store (its ``detail``, with the command,
machine and time of its run); ``python -m studies rnn_attention render`` then writes ``docs/rnn.md`` from
the stored results, so every table and plot on it comes from one run of its part.
The quality part's runs are also the study's test records (attention and LSTM, per recipe).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks._recipe_runs import RECIPES, run_fits_side_by_side
from studies._runner.stats import machine

ROOT = Path(__file__).resolve().parents[2]
STORE = Path(__file__).with_name("store.json")
STUDY_CONFIGS = Path(__file__).with_name("configs")  # the LSTM overlays of the recipes

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
        jobs = [(recipe, lift), (recipe, [f"--config={STUDY_CONFIGS / config}", *lift])]
        attn, lstm = run_fits_side_by_side(jobs, seed=opts.seed, collect=_run_summary)
        when = f"{machine()}, {opts.command}"
        for label, r in (("attention (default)", attn), (f"LSTM ({config})", lstm)):
            row = {"recipe": recipe, "encoder": label, "metric": metric, "lower_is_better": lower, **r, "run": when}
            rows.append(row)
            print(f"   {label}: {json.dumps({k: round(v, 4) for k, v in r.items()})}", flush=True)
    return {"rows": kept + rows}


# ---------------------------------------------------------------------------------------------------
# the models compared: the character LM's encoder and an LSTM of about its parameter count

WIDTH, HEADS, LAYERS, FFN = 192, 6, 4, 768  # recipes/configs/text_lm.yaml
LSTM_LAYERS, LSTM_HIDDEN = 2, 344  # studies/rnn_attention/configs/text_lm_lstm.yaml


def _attention_encoder(width: int = WIDTH, heads: int = HEADS, layers: int = LAYERS, ffn: int = FFN) -> Any:
    from attnmm.nn import Encoder, RotaryPE

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
    from attnmm.masks import Causal, Window
    from attnmm.nn import IncrementalState

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
    args = ([f"--config={STUDY_CONFIGS / config}"] if config else []) + ["--trainer.logger=false"]
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
    """The stored parts (the study store's ``detail``)."""
    return json.loads(STORE.read_text()).get("detail", {}) if STORE.exists() else {}


#: The parts' options (``python -m studies rnn_attention measure PART key=value ...``).
OPTIONS: dict[str, Any] = {
    "quality": "lm,pos", "seed": 0, "lengths": [64, 128, 256, 512, 1024, 2048, 4096],
    "tokens_per_step": 8192, "rounds": 3, "recall_length": 512, "recall_window": 32, "recall_steps": 1500,
    "recall_test": 512, "stream_positions": [64, 256, 1024, 4096, 16384], "stream_window": 256, "stream_steps": 21,
    "generate_tokens": 500, "threads": 2, "device": "cpu",
}


def _stored(name: str, part: Part) -> Callable[[argparse.Namespace], dict[str, Any]]:
    """``part`` at ``threads`` torch threads, stored under its name (a device's other than the CPU apart)."""
    def run(opts: argparse.Namespace) -> dict[str, Any]:
        torch.set_num_threads(opts.threads)
        return {name if opts.device == "cpu" else f"{name}_{opts.device}": part(opts)}

    return run


MEASURE = {name: _stored(name, part) for name, part in PARTS.items()}
