"""Seconds per call of a benchmark case's attnmm side, called plainly again and again (nothing reused by the
caller): ``python -m benchmarks.plain_calls mixed --calls 8``.

Prints one JSON line: the case, the wall seconds of each call after the first (the first, with its warm-up,
apart), their median, and the median of the process's CPU seconds per call (with one thread, the measure a
loaded machine disturbs least). On a shared machine compare two trees only by alternating processes of this
script (``PYTHONPATH`` at one tree, then the other, several times) and reading the ratio of medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from benchmarks._cases import get_case


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("case")
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--threads", type=int, default=1)
    opts = parser.parse_args(argv)
    torch.set_num_threads(opts.threads)
    run = get_case(opts.case).ours(get_case(opts.case).build())
    times, cpu = [], []
    for _ in range(opts.calls + 1):
        start, start_cpu = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    result = {"case": opts.case, "first": times[0], "times": times[1:], "median": statistics.median(times[1:]),
              "cpu": statistics.median(cpu[1:])}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
