"""The self-attention vs RNN study: its recall task, each measured part at a tiny size, and the pages."""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from studies._runner.template import pages
from studies.rnn_attention import measure as bench

PAGE = Path(bench.__file__).with_name("page.md")


def _opts(**kw: object) -> argparse.Namespace:
    defaults = dict(
        seed=0, threads=1, lengths=[16, 32], tokens_per_step=64, rounds=1, recall_length=48, recall_window=4,
        recall_steps=3, recall_test=8, stream_positions=[8, 40], stream_window=16, stream_steps=3, generate_tokens=6,
        command="python -m studies rnn_attention measure (test)", device="cpu",
    )
    return argparse.Namespace(**{**defaults, **kw})


def test_recall_queries_ask_values_stored_earlier() -> None:
    tokens, targets, distance = bench.recall_batch(4, 64, 10, torch.Generator().manual_seed(0))
    again = bench.recall_batch(4, 64, 10, torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip((tokens, targets, distance), again))  # seeded
    asked = (targets >= 0).nonzero().tolist()
    assert asked
    for b, t in asked:
        key = int(tokens[b, t]) - bench.QUERY0
        store = t - int(distance[b, t])
        assert 0 < distance[b, t] <= t
        assert int(tokens[b, store]) == bench.STORE0 + key * bench.VALUES + int(targets[b, t])
    stores = (tokens >= bench.STORE0) & (tokens < bench.QUERY0)
    assert (stores.sum(1) == bench.KEYS).all()  # every key stored once per sequence


def test_every_in_process_part_runs_and_renders() -> None:
    store = {}
    for name in ("parallel", "longrange", "streaming", "generation"):
        store[name] = bench.PARTS[name](_opts())
        store[name]["run"] = {"command": "test", "machine": "test", "minutes": 0.0}
    assert {r["threads"] for r in store["parallel"]["rows"]} == {1}
    rows = {r["model"]: r for r in store["streaming"]["rows"] if r["position"] == 40}
    assert rows["attention, Causal()"]["state_bytes"] > rows["attention, Window(16, 0)"]["state_bytes"]
    assert rows["LSTM"]["state_bytes"] == next(
        r["state_bytes"] for r in store["streaming"]["rows"] if r["model"] == "LSTM" and r["position"] == 8
    )  # constant
    assert all(r.get("equal_within_context", True) for r in store["generation"]["rows"])
    page = "\n".join(pages(PAGE, store)["docs/rnn.md#sections"])
    for title in ("## Parallel training", "## Long-range dependence", "## Streaming cost", "## Generation with"):
        assert title in page
    assert "Not measured yet: `python -m studies rnn_attention measure quality`" in page
    assert set(bench.figures(store)) == {"rnn_parallel", "rnn_longrange", "rnn_streaming"}


def test_quality_section_shows_both_encoders() -> None:
    row = dict(recipe="text_lm", metric="test_loss", lower_is_better=True, encoder_parameters=10.0, steps=5.0,
               seconds=60.0, best_val_loss=1.5, run="r")
    part = {"rows": [{**row, "encoder": "attention (default)", "test_loss": 1.6},
                     {**row, "encoder": "LSTM (x.yaml)", "test_loss": 1.7}]}
    text = "\n".join(pages(PAGE, {"quality": part})["results"])
    assert "| text_lm | attention (default) | 10 | 5 | 1.0 min | 1.500 nats/char | 1.600 nats/char |" in text
    assert "| text_lm | LSTM (x.yaml) | 10 | 5 | 1.0 min | 1.500 nats/char | 1.700 nats/char |" in text
    assert "text_pos scores on UD English-EWT's dev set" in text
    assert pages(PAGE, {})["results"] == ["No quality runs stored yet."]
