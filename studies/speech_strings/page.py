"""The section of :mod:`studies.speech_strings.measure` in docs/recipes/speech.md: the DER, cost and latency
tables, when a mask pays, and the figures, rendered from the stored results alone."""

from __future__ import annotations

import math
from typing import Any

from studies._runner import stats
from studies._runner.stats import ratio_bootstrap, run_line
from studies.speech_strings.measure import FRAME_MS, _recipe, mask_of

#: "Pays": at least this much below Full (0.9: 10% less), so that noise does not decide it.
PAYS = 0.9
#: A DER difference of models without per-recording errors counts only beyond this many standard errors of
#: the difference (binomial, digits taken as independent), besides :data:`PAYS`.
DER_SE = 2.0

def _significant(a: dict[str, Any], b: dict[str, Any], key: str, se: str | None) -> float:
    """How ``a`` differs from ``b`` in ``key`` beyond noise: -1 below, +1 above, 0 within it. By the
    recording bootstrap where both rows carry per-recording errors (``runs``), else by :data:`DER_SE`
    binomial standard errors (``se``), else any difference counts."""
    if a.get("runs") and b.get("runs"):
        _, lo, hi = ratio_bootstrap(a["runs"], b["runs"])
        return -1.0 if hi < 0 else 1.0 if lo > 0 else 0.0
    if se is None:
        return float(math.copysign(1.0, a[key] - b[key])) if a[key] != b[key] else 0.0
    margin = DER_SE * math.hypot(a[se], b[se])
    return -1.0 if b[key] - a[key] > margin else 1.0 if a[key] - b[key] > margin else 0.0


def crossover(rows: list[dict[str, Any]], key: str, mask: str, full: str = "Full", se: str | None = None) -> int | None:
    """The fewest digits from which ``mask`` needs at most :data:`PAYS` times Full's ``key`` at every longer
    length measured (``None``: not even at the longest); with ``se`` (the key of each row's standard error),
    the difference must also be beyond noise (:func:`_significant`)."""
    beyond = None if se is None else (lambda a, b: _significant(a, b, key, se) < 0)
    return stats.crossover(rows, key, mask, full, "digits", PAYS, beyond)


def _noise(rows: list[dict[str, Any]]) -> str:
    """What decides that a DER difference is beyond noise, for these rows."""
    if all(r.get("runs") for r in rows):
        return "its 95% recording-bootstrap interval"
    return f"{DER_SE:g} standard errors"


def _pays(rows: list[dict[str, Any]], mask: str, key: str, what: str, se: str | None = None) -> str:
    """Where ``mask`` starts to pay in ``key``, in words."""
    n, pct = crossover(rows, key, mask, se=se), round(100 * (1 - PAYS))
    below = f"{pct}%" + (f" and by {_noise(rows)}" if se else "") + " below Full's"
    if n is None:
        return f"{what} is not {below} even at {_digits(max(r['digits'] for r in rows))}"
    at = next(r for r in rows if r["mask"] == mask and r["digits"] == n)
    frames = f" ({at['frames']} frames)" if "frames" in at else ""
    return f"{what} is at least {below} from {_digits(n)}{frames} on"


def _der_rows(models: dict[str, Any], decoding: str | None) -> list[dict[str, Any]]:
    """One row per (mask, length), over the mask's training seeds: ``der`` (their mean), ``se`` (one
    binomial standard error of one seed's, or the seeds' sample standard deviation), ``seeds``, and
    ``runs`` (each seed's per-recording errors, when every seed's model has them), greedy (``None``) or by
    the recipe's decoding (models without it are left out)."""
    grouped: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for key, model in models.items():
        for d in model.get("der", []):
            r = d if decoding is None else d.get("recipe")
            if r is not None:
                grouped.setdefault((mask_of(key), d["length"]), []).append(r)
    rows = []
    for (m, n), runs in grouped.items():
        ders = [r["der"] for r in runs]
        p = sum(ders) / len(ders)
        if len(runs) > 1:
            spread = math.sqrt(sum((x - p) ** 2 for x in ders) / (len(ders) - 1))
        else:
            spread = math.sqrt(max(p * (1 - p), 0.0) / runs[0]["digits"])
        rows.append({"mask": m, "digits": n, "der": p, "string_acc": sum(r["string_acc"] for r in runs) / len(runs),
                     "se": spread, "seeds": len(runs), "count": runs[0]["digits"], "strings": runs[0]["strings"],
                     "runs": [r["per_take"] for r in runs] if all("per_take" in r for r in runs) else None})
    return rows


def _recipe_budget() -> str:
    recipe = _recipe()
    return f"{recipe['data']['init_args']['num_train']:,} strings x {recipe['trainer']['max_epochs']} epochs"


def _digits(n: int) -> str:
    return f"{n} digit" + ("" if n == 1 else "s")


def _der_section(models: dict[str, Any]) -> list[str]:
    """DER per mask and string length (one row per mask and decoding), with each model's budget."""
    measured = {m: r for m, r in models.items() if r.get("der")}
    if not measured:
        return []
    decodings = [None, *sorted({d["recipe"]["decoding"] for r in measured.values() for d in r["der"] if "recipe" in d})]
    by = {(dec, r["mask"], r["digits"]): r for dec in decodings for r in _der_rows(measured, dec)}
    lengths = sorted({n for _, _, n in by})
    masks = sorted({mask_of(k) for k in measured}, key=lambda m: (m != "Full", m))
    seeds = {m: sum(mask_of(k) == m for k in measured) for m in masks}
    several = [m for m in masks if seeds[m] > 1]
    spread = ("± is the sample standard deviation over the training seeds (their number in the table) for a mask "
              "trained with several, one binomial standard error (digits taken as independent, the test strings' "
              "noise only) for a mask trained once" if several else
              "± is one binomial standard error (digits taken as independent): it covers the choice of test "
              "strings, not the training run (one seed per mask)")
    counts = ", ".join(f"{_digits(n)}: {r['strings']} strings" for n in lengths
                       for r in [next(v for k, v in by.items() if k[2] == n)])
    data = _recipe()["data"]["init_args"]
    also = f" and by the recipe's decoding (`{decodings[1]}`)" if len(decodings) > 1 else ""
    lines = [
        "#### Digit error rate by string length", "",
        f"DER (%) of each trained model (its training budget in the table; the recipe's is {_recipe_budget()}; "
        f"all trained on strings of {data['min_digits']}-{data['max_digits']} digits, at most "
        f"{data['max_seconds']:g} s), decoded greedily (CTC best path){also}, on test strings of exactly n "
        f"digits drawn like the recipe's test strings from the test takes, test seed {data['test_seed']} "
        f"({counts}; the same strings for every mask; the mean over the training seeds). {spread}.", "",
        "| mask | training | seeds | decoding | " + " | ".join(_digits(n) for n in lengths) + " |",
        "|---|---|---|---|" + "---|" * len(lengths),
    ]
    for m in masks:
        first = next(r for k, r in measured.items() if mask_of(k) == m)
        for dec in decodings:
            cells = [by.get((dec, m, n)) for n in lengths]
            if not any(cells):
                continue
            lines.append(f"| {m} | {_budget(first)} | {seeds[m]} | {dec or 'greedy'} | " + " | ".join(
                f"{100 * c['der']:.2f} ± {100 * c['se']:.2f}" if c else "-" for c in cells) + " |")
    lines.append("")
    return lines


def _der_pays(models: dict[str, Any], mask: str) -> list[str]:
    """Where ``mask`` starts to pay in DER (greedy and the recipe's decoding), and where it costs, in words."""
    if "Full" not in models or not models.get(mask, {}).get("der") or not models["Full"].get("der"):
        return []
    if _budget(models[mask]) != _budget(models["Full"]):
        return [f"DER not compared ({mask} trained {_budget(models[mask])}, Full {_budget(models['Full'])})"]
    said = []
    recipe = next((d["recipe"]["decoding"] for d in models[mask]["der"] if "recipe" in d), None)
    for dec in (None, recipe) if recipe else (None,):
        rows = _der_rows(models, dec)
        text = _pays(rows, mask, "der", f"{dec or 'greedy'} DER", se="se")
        by = {(r["mask"], r["digits"]): r for r in rows}
        worse = [n for (m, n), a in sorted(by.items()) if m == mask and (b := by.get(("Full", n)))
                 and _significant(a, b, "der", "se") > 0]
        if worse:
            at = ", ".join(map(str, worse[:-1])) + (" and " if len(worse) > 1 else "") + _digits(worse[-1])
            text += f" (above Full's beyond {_noise(rows)} at {at})"
        said.append(text)
    if _budget(models[mask]) != _recipe_budget():
        said[-1] += f" (both trained {_budget(models[mask])}, a reduced budget)"
    return said


def _cost_section(part: dict[str, Any], models: dict[str, Any]) -> list[str]:
    rows = part["rows"]
    masks = sorted(dict.fromkeys(r["mask"] for r in rows), key=lambda m: (m != "Full", m))
    lengths = sorted({r["digits"] for r in rows})
    by = {(r["mask"], r["digits"]): r for r in rows}
    lines = [
        "### Where truncation pays: step time, memory and error by string length", "",
        "Where each truncated mask starts to pay against Full, measured: the fewest digits from which it "
        f"pays at every longer length measured (at least {round(100 * (1 - PAYS))}% below Full's; for DER, "
        "the mean over the training seeds, also beyond noise: where each model kept its errors per test "
        "recording, the 95% interval of the difference from resampling the test recordings "
        "(2000 resamples; the strings reuse recordings, so digits are not independent), each "
        f"recording's errors averaged over the seeds, lies below 0; for older runs without them, by more than "
        f"{DER_SE:g} binomial standard errors of one training run):", "",
    ]
    for m in masks + sorted({mask_of(k) for k in models} - set(masks) - {"Full"}):
        if m != "Full":
            cost = [_pays(rows, m, "step_s", "step time"), _pays(rows, m, "peak_mb", "peak memory")] if m in masks \
                else ["step time and memory not measured (not a mask of the cost part)"]
            lines.append(f"- **{m}**: " + "; ".join([*cost, *_der_pays(models, m)]) + ".")
    untrained = [m for m in masks if not models.get(m, {}).get("der")]
    if untrained:
        names = ",".join(untrained)
        lines += ["", f"DER of {', '.join(untrained)}: not measured yet (`python -m studies speech_strings measure "
                  f"train 'masks={names}'`)."]
    lines += [
        "",
        "#### Step time and memory by string length", "",
        f"One training step of the recipe's model (forward, hybrid CTC/attention loss, backward, AdamW) on "
        f"{rows[0]['batch']} test strings of exactly n digits, each mask in a fresh process on one thread; "
        f"time is the fastest of {part['steps']} steps after a warm-up, scaled to an epoch of "
        f"{part['steps_per_epoch']} steps (the recipe's {_recipe()['data']['init_args']['num_train']:,} "
        "strings), memory the step's peak above its inputs. Measured by " + run_line(part["run"])
        + (f"; load average {part['load_avg']:.1f} (5 min; other jobs)" if "load_avg" in part else "")
        + ".", "",
        "![training step time and peak memory against string length, by mask]"
        "(../figures/speech_strings_cost.png)", "",
        "| digits | frames | mask | epoch (min) | vs Full | peak (MB) | vs Full |",
        "|---|---|---|---|---|---|---|",
    ]
    for n in lengths:
        full = by.get(("Full", n))
        for m in masks:
            r = by.get((m, n))
            if r is None:
                continue
            t_ratio = f"{r['step_s'] / full['step_s']:.2f}" if full else "-"
            m_ratio = f"{r['peak_mb'] / full['peak_mb']:.2f}" if full and full["peak_mb"] > 0 else "-"
            lines.append(f"| {n} | {r['frames']} | {m} | {r['epoch_min']:.2f} | {t_ratio} | {r['peak_mb']:.0f} | "
                         f"{m_ratio} |")
    lines.append("")
    return lines + _der_section(models)


def _models_section(models: dict[str, Any]) -> list[str]:
    reduced = [m for m, r in models.items() if _budget(r) != _recipe_budget()]
    seeds = sorted({sum(mask_of(k) == m for k in models) for m in {mask_of(k) for k in models}})
    count = str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]} to {seeds[-1]}"
    per_mask = ("One seed per mask" if seeds == [1] else
                f"{count} training seeds per mask (a row each; seed 0 under the mask's name, another as "
                "\"MASK (seed N)\")")
    lines = [
        "### The models", "",
        f"The recipe's config with only the mask and the budget changed (the recipe's budget is "
        f"{_recipe_budget()}), trained by the recipe or by the same config, seed and data in a Lightning "
        "Trainer of this module (its `train` part); validation picks the checkpoint with the lowest "
        "validation DER under the decoding of the table, which also decodes the test DER (the recipe's "
        f"1,000 test strings). {per_mask}; wall times are of a shared machine and include validation.", "",
    ]
    if reduced:
        lines += [
            f"{', '.join(reduced)}: trained at a reduced budget, far from converged; their DER differences "
            "are not evidence about the masks.", "",
        ]
    lines += [
        "| mask | training | trained by | decoding | best epoch | train wall (min) | s per epoch | test DER (%) | "
        "strings exact (%) | run |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m, r in models.items():
        by = "`recipes/speech_truncated.py fit`" if "peak_rss_mb" in r else "this module's Trainer"
        lines.append(
            f"| {m} | {_budget(r)} | {by} | {r.get('decoding', 'greedy')} | {int(r['best_epoch'])} | "
            f"{r['seconds'] / 60:.1f} | {r['seconds'] / r['epochs']:.0f} | {100 * r['test_der']:.2f} | "
            f"{100 * r['test_string_acc']:.1f} | {r['run']['machine']} |"
        )
    lines.append("")
    return lines


def _budget(model: dict[str, Any]) -> str:
    return f"{model['num_train']:,} strings x {model['epochs']} epochs"


def _latency_section(models: dict[str, Any], reference: dict[str, Any] | None) -> list[str]:
    # one row per mask: its first seed's model (another seed streams the same chunks)
    streamed = {m: r["stream"] for m, r in models.items() if "stream" in r and mask_of(m) == m}
    budgets = sorted({_budget(models[m]) for m in streamed})
    if reference is not None:
        streamed[f"{reference['mask']}, {reference['budget']}"] = reference["stream"]
    if not streamed:
        return []
    s0 = next(iter(streamed.values()))
    if len(budgets) == 1:
        which = f" (each {budgets[0]}" + (", a reduced budget)" if budgets[0] != _recipe_budget() else ")")
    else:
        which = " (budgets: " + "; ".join(f"{m} {_budget(models[m])}" for m in streamed if m in models) + ")"
    lines = [
        "### Emission latency by chunk size", "",
        f"The first {s0['strings']} recipe test strings streamed 100 ms at a time through "
        "`StreamingRecognizer` (greedy CTC). Latency of a correctly emitted digit: the sample at which the "
        "stream emits it (its frame's chunk complete, front end included; compute time excluded) minus "
        "the sample where that digit's recording ends in the string (`emission_latency`, with "
        "`DigitStrings.digit_ends`). Negative: emitted before the recording ends (FSDD recordings keep a "
        "little silence after the word, and a CTC spike often comes before the word's end). A digit whose "
        "chunk is the last, partial one is emitted when the stream ends (at flush), after the trailing "
        "silence. Every chunk mask keeps 16 frames (640 ms) of left context. The models are those of the "
        "table at the end of this section" + (which if budgets else "")
        + (f"; the last row is {reference['budget']}" if reference is not None else "") + ".", "",
        "| mask | chunk (ms) | latency mean (ms) | p50 | p95 | max | emitted at flush | streamed DER (%) | "
        "streamed = full decode |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for m, s in streamed.items():
        lines.append(
            f"| {m} | {s['step_frames'] * FRAME_MS} | {s['latency_mean_ms']:.0f} | {s['latency_p50_ms']:.0f} | "
            f"{s['latency_p95_ms']:.0f} | {s['latency_max_ms']:.0f} | {s['emitted_at_flush']} | "
            f"{100 * s['der']:.2f} | {s['equal_to_full']}/{s['strings']} |"
        )
    lines.append("")
    chunks = sorted(((s["step_frames"], s) for m, s in streamed.items() if m in models), key=lambda c: c[0])
    if len(chunks) > 1:
        (f0, a), (f1, b) = chunks[0], chunks[-1]
        lines += [
            f"From chunks of {f0 * FRAME_MS} ms to chunks of {f1 * FRAME_MS} ms the mean latency grows by "
            f"{b['latency_mean_ms'] - a['latency_mean_ms']:.0f} ms and the 95th percentile by "
            f"{b['latency_p95_ms'] - a['latency_p95_ms']:.0f} ms (the chunk grows by {(f1 - f0) * FRAME_MS} ms)"
            + ("; the models differ in budget, so the comparison is rough" if len(budgets) > 1 else "") + ".",
            "",
        ]
    same = next((m for m in models if reference is not None and m == reference["mask"] and "stream" in models[m]), None)
    if same is not None and reference is not None:
        a, b = models[same]["stream"], reference["stream"]
        lines += [
            f"{same} trained here ({_budget(models[same])}) and the recipe's own run (streamed DER "
            f"{100 * a['der']:.1f}% vs {100 * b['der']:.1f}%): mean latency {a['latency_mean_ms']:.0f} vs "
            f"{b['latency_mean_ms']:.0f} ms, 95th percentile {a['latency_p95_ms']:.0f} vs "
            f"{b['latency_p95_ms']:.0f} ms.", "",
        ]
    return lines


def render_section(store: dict[str, Any]) -> str:
    """The study's block of docs/recipes/speech.md, from the stored results."""
    models = store.get("models", {})
    lines = [
        "",
        "## Connected digits: latency and cost by mask", "",
        "The connected-digits model under other masks, measured by `python -m studies speech_strings measure` "
        "(`studies/speech_strings/measure.py` says how).", "",
    ]
    lines += _latency_section(models, store.get("reference"))
    if "cost" in store:
        lines += _cost_section(store["cost"], models)
    else:
        command = "python -m studies speech_strings measure cost"
        lines += [f"Step time and memory: not measured yet (`{command}`).", ""]
    if models:
        lines += _models_section(models)
    return "\n".join(lines) + "\n"


def figures(store: dict[str, Any]) -> dict[str, Any]:
    """Step time and peak memory against string length, per mask (matplotlib), when measured."""
    from matplotlib.figure import Figure

    if "cost" not in store:
        return {}
    rows = store["cost"]["rows"]
    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    ax_t, ax_m = fig.subplots(1, 2)
    for m in dict.fromkeys(r["mask"] for r in rows):
        sel = sorted((r for r in rows if r["mask"] == m), key=lambda r: r["digits"])
        ax_t.plot([r["digits"] for r in sel], [r["step_s"] for r in sel], marker="o", label=m)
        ax_m.plot([r["digits"] for r in sel], [r["peak_mb"] for r in sel], marker="o", label=m)
    lengths = sorted({(r["digits"], r["frames"]) for r in rows if r["mask"] == "Full"})
    for ax, label in ((ax_t, "training step (s)"), (ax_m, "peak memory of a step (MB)")):
        ax.set(xscale="log", yscale="log", xlabel="digits per string (frames)", ylabel=label)
        ax.set_xticks([n for n, _ in lengths], [f"{n}\n({f})" for n, f in lengths])
        ax.minorticks_off()
    ax_t.legend()
    return {"speech_strings_cost": fig}
