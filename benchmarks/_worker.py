"""``python -m benchmarks._worker CASE SIDE``: the memory of a case's side as a fresh process feels it,
printed as JSON: the peak over its first three full-size calls (no warm-up: the first call's caches,
compilation and allocator growth count) and what stays held after them (:func:`benchmarks._measure.process_peak`)."""

from __future__ import annotations

import json
import sys

import torch

from benchmarks._cases import get_case
from benchmarks._measure import process_peak, threads


def main(case_key: str, side: str) -> None:
    torch.set_num_threads(threads())
    # torch's first backward with a given gradient imports its symbolic-shapes module (sympy, about 30 MB of
    # Python objects) in any program; done here, before the baseline, as importing the cases once did
    torch.ones(1, requires_grad=True).backward(torch.ones(1))
    case = get_case(case_key)
    inputs = case.build()
    run = (case.ours if side == "ours" else case.peer)(inputs)
    peak, held = process_peak(run, calls=3)
    print(json.dumps({"case": case_key, "side": side, "peak": peak, "held": held}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
