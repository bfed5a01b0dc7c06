"""The page of :mod:`studies.rnn_attention.measure`: docs/rnn.md's tables, the statements derived from the
numbers, and the figures docs/make_figures.py draws, all rendered from the stored results alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from studies._runner.stats import nbytes, run_line, seconds
from studies.rnn_attention.measure import LAYERS, LSTM_HIDDEN, LSTM_LAYERS, RECALL_KEYS, RECALL_VALUES, WIDTH

#: Recipes whose "test" score is their dev set, the set that also chose the checkpoint: not a held-out test.
#: UD English-EWT's test file is not among the data, so the POS recipe tests on dev (UDPOSDataModule.test_split).
DEV_IS_TEST = {
    "text_pos": "UD English-EWT's dev set, which also chose the checkpoint (its test file is not in the data)",
}


def _scored_on(recipe: str) -> str:
    """Where ``recipe``'s comparison is scored."""
    return f"on {DEV_IS_TEST[recipe]}: a selection-set figure, not a held-out test" if recipe in DEV_IS_TEST else (
        "on the recipe's test set")



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
        "(batch x length), fp32, fastest of alternated rounds. Run: " + run_line(part["run"]) + ".",
        "",
        "| threads | length L | batch | LSTM step | attention step | LSTM tokens/s | attention tokens/s "
        "| LSTM time / attention time |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        n = r["batch"] * r["length"]
        out.append(
            f"| {r['threads']} | {r['length']:,} | {r['batch']} | {seconds(r['lstm_s'])} | {seconds(r['attention_s'])} "
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
        "| recipe | encoder | encoder parameters | steps | wall time | best validation | test (text_pos: dev) |",
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
            f"{_scored_on(recipe)} "
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
        f"Two `Window({part['window']}, 0)` layers reach at most {horizon} tokens back. Run: "
        + run_line(part["run"]) + ".",
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
        f"{part['window']}. Median of consecutive steps. Run: " + run_line(part["run"]) + ".",
        "",
        "| t | " + " | ".join([*(f"{n}: ms/token" for n in names), *(f"{n}: state" for n in names)]) + " |",
        "|---:|" + "---:|" * (2 * len(names)),
    ]
    for t in positions:
        ms = " | ".join(f"{at[(n, t)]['step_ms']:.2f}" for n in names)
        mb = " | ".join(nbytes(at[(n, t)]["state_bytes"]) for n in names)
        out.append(f"| {t:,} | {ms} | {mb} |")
    out += ["", "![per-token cost and state against position](figures/rnn_streaming.png)", ""]
    first, last = positions[0], positions[-1]
    lines = []
    for n in names:
        a, b = at[(n, first)], at[(n, last)]
        lines.append(
            f"{n}: {a['step_ms']:.2f} ms and {nbytes(a['state_bytes'])} at t = {first:,}, "
            f"{b['step_ms']:.2f} ms and {nbytes(b['state_bytes'])} at t = {last:,}."
        )
    return [*out, " ".join(lines), ""]


def _generation_section(part: dict[str, Any]) -> list[str]:
    out = [
        "## Generation with a key/value cache",
        "",
        f"`attnmm.lightning.generate` samples the character LM one token at a time ({part['prompt_tokens']}-token "
        f"prompt, greedy, context {part['context']}). Without the cache every step re-reads the last "
        f"{part['context']} tokens; with it (the default) the prompt is read once and each step reads one token, "
        "the attention layers keeping their keys and values (the LSTM its state). Weights as initialised "
        "(speed does not depend on them). Run: " + run_line(part["run"]) + ".",
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
            where = " (dev set, also the selection set)" if r_attn["recipe"] in DEV_IS_TEST else ""
            bullets.append(
                f"**Quality at equal training time**, {r_attn['recipe']}: {winner} "
                f"({metric}{where} {a:.4f} for attention, {b:.4f} for the LSTM)."
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
            f"({nbytes(at_last[smallest]['state_bytes'])})."
        )
    if not bullets:
        return []
    return ["## Where each wins, on this machine", "", *(f"- {b}" for b in bullets), ""]


def render_page(store: dict[str, Any]) -> str:
    """docs/rnn.md's measured sections from the stored results (a part not run yet is named as such)."""
    lines: list[str] = []
    for name, section in SECTIONS.items():
        if name in store:
            lines += section(store[name])
        elif name == "parallel_cuda":
            lines += ["## Parallel training on a GPU", "", "Not measured yet (no GPU was available): "
                      "`python -m studies rnn_attention measure parallel device=cuda`.", ""]
        else:
            command = f"python -m studies rnn_attention measure {name}"
            lines += [f"## {name}", "", f"Not measured yet: `{command}`.", ""]
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
