"""The cost of training and reading a sequence with the character LM's causal attention encoder and an LSTM of
about its parameter count: the parts ``parallel``, ``streaming`` and ``generation`` of
``python -m studies rnn_attention measure`` (kept in that study's store, shown on docs/rnn.md).

- ``parallel``: one training step (forward and backward) against sequence length at a fixed number of tokens per
  step, on 1 and ``threads`` threads (or a ``device``), the two encoders alternated (:func:`._measure.alternate`).
- ``streaming``: the cost of reading one more token after t, and the state kept for it (the LSTM's hidden state,
  causal attention's growing key/value cache, ``Window``'s bounded one), median of consecutive steps.
- ``generation``: tokens per second of the character LM sampled with and without the key/value cache.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any

import torch

from benchmarks._measure import alternate
from benchmarks._recipe_runs import RECIPES

WIDTH = 192  # recipes/configs/text_lm.yaml; studies/rnn_attention/configs/text_lm_lstm.yaml: 2 layers of 344
OPTIONS: dict[str, Any] = {"lengths": [64, 128, 256, 512, 1024, 2048, 4096], "tokens_per_step": 8192, "rounds": 3,
                           "stream_positions": [64, 256, 1024, 4096, 16384], "stream_window": 256, "stream_steps": 21,
                           "generate_tokens": 500, "threads": 2, "device": "cpu"}


def attention(width: int = WIDTH, heads: int = 6, layers: int = 4, ffn: int = 768) -> Any:
    from attnmm.nn import Encoder, RotaryPE

    return Encoder(width, heads, layers, ffn, dropout=0.0, rotary=RotaryPE(width // heads))


def lstm(width: int = WIDTH, layers: int = 2, hidden: int = 344) -> Any:
    from attnmm.nn import RecurrentEncoder

    return RecurrentEncoder(width, layers, hidden_size=hidden)


def parallel(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.masks import Causal

    device = torch.device(opts.device)
    torch.manual_seed(opts.seed)
    models = {"attention": attention().to(device), "lstm": lstm().to(device)}

    def step(model: torch.nn.Module, x: torch.Tensor, grad: torch.Tensor) -> Any:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            model(x, Causal()).backward(grad)
            if device.type == "cuda":
                torch.cuda.synchronize()

        return run

    rows = []
    for threads in sorted({1, opts.threads}) if device.type == "cpu" else [opts.threads]:
        torch.set_num_threads(threads)
        for length in opts.lengths:
            batch = max(1, opts.tokens_per_step // length)
            x = torch.randn(batch, length, WIDTH, device=device, requires_grad=True)
            grad = torch.randn(batch, length, WIDTH, device=device)
            t_lstm, t_attn = alternate(step(models["lstm"], x, grad), step(models["attention"], x, grad), opts.rounds)
            rows.append({"threads": threads, "length": length, "batch": batch, "lstm_s": t_lstm, "attention_s": t_attn})
    torch.set_num_threads(opts.threads)
    return {"rows": rows, "parameters": {k: sum(p.numel() for p in m.parameters()) for k, m in models.items()},
            "tokens_per_step": opts.tokens_per_step, "device": device.type}


def streaming(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.masks import Causal, Window
    from attnmm.nn import IncrementalState

    torch.manual_seed(opts.seed)
    w = opts.stream_window
    models = {"LSTM": (lstm().eval(), Causal()), "attention, Causal()": (attention().eval(), Causal()),
              f"attention, Window({w}, 0)": (attention().eval(), Window(w, 0))}
    rows = []
    with torch.no_grad():
        for t in opts.stream_positions:
            prefix, steps = torch.randn(1, t, WIDTH), torch.randn(1, opts.stream_steps, WIDTH)
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
                rows.append({"model": name, "position": t, "step_ms": 1e3 * sorted(times)[len(times) // 2],
                             "state_bytes": state.num_bytes()})
    return {"rows": rows, "window": w}


def _lm(config: str | None) -> Any:
    """The character LM as its recipe's CLI builds it (its default config, or a config of the study's)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("text_lm_recipe", RECIPES / "text_lm.py")
    assert spec is not None and spec.loader is not None
    recipe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(recipe)
    configs = RECIPES.parent / "studies" / "rnn_attention" / "configs"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return recipe.main([*([f"--config={configs / config}"] if config else []), "--trainer.logger=false"],
                           run=False).model.eval()


def generation(opts: argparse.Namespace) -> dict[str, Any]:
    from attnmm.lightning.generate import generate

    rows, context, n = [], 256, opts.generate_tokens
    prompt = torch.randint(2, 67, (1, 6), generator=torch.Generator().manual_seed(opts.seed))
    for name, config in (("attention (text_lm.yaml)", None), ("LSTM (text_lm_lstm.yaml)", "text_lm_lstm.yaml")):
        torch.manual_seed(opts.seed)
        model, outputs = _lm(config), {}
        for cache in (False, True):
            generate(model, prompt, 8, context, temperature=0.0, cache=cache)  # warm-up
            start = time.perf_counter()
            outputs[cache] = generate(model, prompt, n, context, temperature=0.0, cache=cache)
            seconds = time.perf_counter() - start
            rows.append({"model": name, "cache": cache, "tokens": n, "seconds": seconds, "tokens_per_s": n / seconds})
        # the same tokens while everything fits in the context
        rows[-1]["equal_within_context"] = bool(torch.equal(outputs[True][:, :context], outputs[False][:, :context]))
    return {"rows": rows, "context": context, "prompt_tokens": int(prompt.size(1))}


PARTS = {"parallel": parallel, "streaming": streaming, "generation": generation}


def plot(panels: list[tuple[dict[str, list[tuple[float, float]]], str, str]], xscale: str = "log",
         yscale: str = "log", hlines: dict[str, float] | None = None, vlines: dict[str, float] | None = None,
         **axes: Any) -> Any:
    """A figure of side-by-side panels, each ``(curves, xlabel, ylabel)`` with ``curves`` {label: [(x, y)]}."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4 if len(panels) == 1 else 9.6, 4.0 if len(panels) == 1 else 3.8), layout="constrained")
    for ax, (curves, xlabel, ylabel) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels):
        for label, points in curves.items():
            ax.plot(*zip(*points), "--" if label.startswith("LSTM,") else "-", marker="o", label=label)
        for label, y in (hlines or {}).items():
            ax.axhline(y, color="grey", linestyle=":", label=label)
        for label, x in (vlines or {}).items():
            ax.axvline(x, color="grey", linestyle="--", label=label)
        ax.set(xscale=xscale, yscale=yscale, xlabel=xlabel, ylabel=ylabel, **axes)
    fig.axes[0].legend()
    return fig


def figures(detail: dict[str, Any]) -> dict[str, Any]:
    """docs/rnn.md's figures of the parts stored: tokens per second against length, streaming cost and state."""
    out = {}
    if "parallel" in detail:
        rows = detail["parallel"]["rows"]
        curves = {f"{label}, {th} thread(s)": [(r["length"], r["batch"] * r["length"] / r[f"{key}_s"]) for r in rows
                                                if r["threads"] == th]
                  for th in sorted({r["threads"] for r in rows}) for key, label in (("attention", "causal attention"),
                                                                                     ("lstm", "LSTM"))}
        out["rnn_parallel"] = plot([(curves, "sequence length L", "training tokens / s")])
    if "streaming" in detail:
        rows = detail["streaming"]["rows"]

        def by_model(value: Any) -> dict[str, list[tuple[float, float]]]:
            return {m: [(r["position"], value(r)) for r in rows if r["model"] == m] for m in dict.fromkeys(
                r["model"] for r in rows)}

        out["rnn_streaming"] = plot([(by_model(lambda r: r["step_ms"]), "tokens read t", "ms for token t + 1"),
                                     (by_model(lambda r: r["state_bytes"] / 2**20), "tokens read t",
                                      "state kept (MB)")])
    return out
