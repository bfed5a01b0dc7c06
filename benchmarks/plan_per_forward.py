"""One attention plan per forward: ``python -m benchmarks.plan_per_forward``.

Every layer of an encoder attends under the same mask with the same sizes, so dispatch (every
backend's checks, cost and memory estimates) and the mask's derived forms come out the same in each.
:class:`~attnmm.nn.Encoder` makes them once per forward and shares them among its layers
(:class:`~attnmm.attention.AttentionPlan`). This measures what that saves, in the setting where it
matters most: short sequences, where a layer's arithmetic is small next to dispatch.

Rows (forward + backward, fp32, one thread by default), each timed with the plan shared by the layers
(what the encoder does) and with every layer dispatching on its own (the plan switched off), in
alternating order, fastest call of each side:

- a 12-layer encoder (D = 64, 4 heads, feed-forward 128) on 8 sequences of L = 16, 32 and 64 under
  ``Window(8, 2) & Padding(lengths)`` (new lengths every call, as a speech batch brings);
- the speech recipe's model (``speech_truncated.yaml``: log-mel front end, 4 layers of width 96 under
  ``Window(16, 4) & Padding``, pooling head) on a batch of 32 spoken-digit-length clips.

Results go to ``benchmarks/results/plan_per_forward.json``; the table in docs/attention.md (between its
``plan_per_forward`` markers) is rendered from them (``--render-only`` renders it again from the store).
"""

from __future__ import annotations

import argparse
import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

import attnmm.nn.encoder as encoder_module
from attnmm.masks import Padding, Window
from attnmm.nn import Encoder
from benchmarks._measure import alternate, machine_line

RESULTS = Path(__file__).with_name("results") / "plan_per_forward.json"
PAGE = Path(__file__).resolve().parent.parent / "docs" / "attention.md"
START, END = "<!-- plan_per_forward:start -->", "<!-- plan_per_forward:end -->"


def _no_plan(*args: Any, **kwargs: Any) -> None:
    """No plan to share: every layer's call makes its own (the behaviour without a plan)."""
    return None


@contextlib.contextmanager
def per_layer_dispatch() -> Iterator[None]:
    """Within the block, an :class:`Encoder` gives its layers no shared plan."""
    shared = encoder_module.AttentionPlan
    encoder_module.AttentionPlan = _no_plan  # type: ignore[assignment,misc]
    try:
        yield
    finally:
        encoder_module.AttentionPlan = shared  # type: ignore[misc]


def _encoder_step(length: int, seed: int = 0) -> Callable[[], None]:
    torch.manual_seed(seed)
    enc = Encoder(64, 4, 12, 128, dropout=0.0)
    x = torch.randn(8, length, 64, requires_grad=True)
    g = torch.Generator().manual_seed(seed)

    def step() -> None:
        lengths = torch.randint(length // 2, length + 1, (8,), generator=g)  # new lengths every call
        enc(x, Window(8, 2) & Padding(lengths)).sum().backward()

    return step


def _speech_step(seed: int = 0) -> Callable[[], None]:
    from attnmm.adapters import SpeechAdapter
    from attnmm.lightning import ClassificationTask
    from attnmm.nn import PoolingClassifier

    torch.manual_seed(seed)
    task = ClassificationTask(
        SpeechAdapter(d_model=96, sample_rate=8000, n_mels=40, channels=32, mask=Window(16, 4), dropout=0.1),
        Encoder(96, 4, 4, 192, dropout=0.1), PoolingClassifier(96, 10, dropout=0.1), 10,
    ).train()
    g = torch.Generator().manual_seed(seed)

    def step() -> None:
        lengths = torch.randint(2400, 8000, (32,), generator=g)  # 0.3-1 s at 8 kHz, as FSDD's digits
        waveform = torch.randn(32, int(lengths.max()), generator=g) * 0.1
        batch = {"waveform": waveform, "lengths": lengths, "label": torch.randint(0, 10, (32,), generator=g)}
        logits = task(batch)
        torch.nn.functional.cross_entropy(logits, batch["label"]).backward()

    return step


ROWS: dict[str, Callable[[], Callable[[], None]]] = {
    "encoder L=16": lambda: _encoder_step(16),
    "encoder L=32": lambda: _encoder_step(32),
    "encoder L=64": lambda: _encoder_step(64),
    "speech model": _speech_step,
}


def _without_sharing(step: Callable[[], None]) -> Callable[[], None]:
    def separate() -> None:
        with per_layer_dispatch():
            step()

    return separate


def measure(rows: list[str], rounds: int) -> list[dict[str, Any]]:
    """Each row's fastest step with the plan shared and with every layer dispatching."""
    out = []
    for name in rows:
        shared_step, separate = ROWS[name](), _without_sharing(ROWS[name]())
        separate_s, shared_s = alternate(separate, shared_step, rounds=rounds, warmup=2)
        assert separate_s is not None
        out.append({"row": name, "per_layer_ms": 1e3 * separate_s, "shared_ms": 1e3 * shared_s,
                    "saving": 1 - shared_s / separate_s})
        print(f"   {name}: {1e3 * separate_s:.1f} ms -> {1e3 * shared_s:.1f} ms", flush=True)
    return out


def markdown(rows: list[dict[str, Any]]) -> str:
    """The table of :func:`measure`'s rows."""
    lines = ["| step (forward + backward) | every layer dispatches (ms) | one plan per forward (ms) | saving |",
             "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['per_layer_ms']:.1f} | {r['shared_ms']:.1f} | {100 * r['saving']:.0f}% |")
    return "\n".join(lines)


def render_page(page: str, stored: dict[str, Any]) -> str:
    """``page`` with its section between the markers replaced by the stored run's table."""
    from benchmarks._page import generated

    footer = (f"Fastest of {stored['rounds']} alternating rounds per side, {stored['threads']} thread(s), "
              f"{stored['machine']}.")
    return generated(page, START, END, "python -m benchmarks.plan_per_forward", RESULTS,
                     [markdown(stored["rows"]), "", footer])


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="*", default=list(ROWS), choices=list(ROWS))
    parser.add_argument("--rounds", type=int, default=101)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render-only", action="store_true", help="render the page's table from the store")
    opts = parser.parse_args(argv)
    if opts.render_only:
        stored = json.loads(RESULTS.read_text())
    else:
        torch.set_num_threads(opts.threads)
        rows = measure(opts.rows, opts.rounds)
        stored = {"machine": machine_line(), "threads": opts.threads, "rounds": opts.rounds, "rows": rows}
        print(markdown(rows))
        if opts.no_write:
            return rows
        RESULTS.parent.mkdir(exist_ok=True)
        RESULTS.write_text(json.dumps(stored, indent=2) + "\n")
    PAGE.write_text(render_page(PAGE.read_text(), stored))
    return stored["rows"]


if __name__ == "__main__":
    main()
