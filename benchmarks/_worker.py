"""``python -m benchmarks._worker CASE SIDE``: the peak memory of one call, printed as JSON."""

from __future__ import annotations

import json
import sys

import torch

from benchmarks._cases import get_case
from benchmarks._measure import peak_of, threads


def main(case_key: str, side: str) -> None:
    torch.set_num_threads(threads())
    case = get_case(case_key)
    inputs = case.build()
    run = (case.ours if side == "ours" else case.peer)(inputs)
    run()  # warm-up (for FlexAttention: compilation)
    print(json.dumps({"case": case_key, "side": side, "peak": peak_of(run)}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
