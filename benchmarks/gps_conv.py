"""attnmm's GPSConv against PyG's on Peptides-func batches: time and peak memory of forward + backward.

Each measurement is a fresh process (the two layers take turns, round after round) that reads real
Peptides-func batches of 64 graphs (their nodes, edges and graph sizes; node and edge features random of
the layer's width), builds the layer (GINE local layer, width 64, 4 heads, batch norm, PyG's
arguments; the same weights for both, from one seed) and times forward + backward on CPU (one thread
unless ``--threads``): the first call in the process, then the median of ``--calls`` calls on other
batches (steady state). Peak memory is measured in processes of its own: the growth of the peak resident
memory over what the process held before the call (Linux: the peak is reset through
``/proc/self/clear_refs`` before each measured call), with glibc told to map every block of 128 KiB or
more on its own (``MALLOC_MMAP_THRESHOLD_``), so that a freed tensor leaves the resident memory at once
and the peak is that of the live tensors, in the first call as in later ones.
Two more columns: attnmm's layer with ``recompute=True`` (the local layer's and the MLP's activations
recomputed in the backward), and its layer without the attention branch (``attn_type=None``): the local
layer, the MLP and the norms alone, which bounds what any attention can save against PyG's.
A first call's peak also holds the library code it pages in for the first time (several MiB, the same
for any input size), so the peak of the first full-size call is measured once more in processes that
call the layer on one graph before it (loading that code, and nothing of the full size), and the peak of
the tensors alone in processes of their own: the highest sum of live bytes over the allocations and frees
that ``torch.profiler`` records (``profile_memory``) in the first call, and in the next one.

With ``--device cuda`` the layers run on the GPU: time between CUDA synchronisations, and peak memory
as the CUDA allocator counts it (``torch.cuda.max_memory_allocated`` over what the process held before
the call: tensors only, so no further columns), stored apart and shown in a table of their own.

    python benchmarks/gps_conv.py --rounds 5
    python benchmarks/gps_conv.py --device cuda --rounds 5

Needs the Peptides-func graphs (``$ATTNMM_DATA/lrgb/peptides-functional``, built once and cached), or
the batches' structure saved beforehand where they are (``--save-batches FILE``, then ``--batches FILE``
on a machine without them).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).with_name("results") / "gps_conv.json"
PAGE = Path(__file__).resolve().parents[1] / "docs" / "graphs.md"
START, END = "<!-- gps_conv:start -->", "<!-- gps_conv:end -->"
#: where a measurement on the GPU is stored and shown
CUDA_RESULTS = Path(__file__).with_name("results") / "gps_conv_cuda.json"
CUDA_START, CUDA_END = "<!-- gps_conv_cuda:start -->", "<!-- gps_conv_cuda:end -->"
#: the layers measured: attnmm's, PyG's, attnmm's with recompute=True, attnmm's without its attention branch
WHICH = ("ours", "pyg", "recompute", "local")


def _peak_reset() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size


def _status(key: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _tensor_peak(call: Any) -> int:
    """The highest sum of live tensor bytes during ``call()``, from the profiler's allocations and frees."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        call()
    live = peak = 0
    for event in sorted((e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"),
                        key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak


def _batches(count: int, saved: str | None = None) -> list[Any]:
    """``count`` training batches of 64 Peptides-func graphs (their structure: ``num_nodes``, ``edge_index``,
    ``batch``), the same in every process; from the file ``saved`` (written by ``--save-batches``) if given."""
    from types import SimpleNamespace

    import torch

    if saved is not None:
        stored = torch.load(saved)
        if len(stored) < count:
            raise SystemExit(f"{saved} holds {len(stored)} batches; --calls {count - 1} needs {count}")
        return [SimpleNamespace(num_nodes=b["batch"].numel(), **b) for b in stored[:count]]
    from attnmm.data import GraphDataModule

    data = GraphDataModule(name="peptides-func", batch_size=64)
    data.prepare_data()
    data.setup("fit")
    torch.manual_seed(0)  # the same shuffled batches in every process, for both layers
    loader = iter(data.train_dataloader())
    return [next(loader) for _ in range(count)]


def _child(
    which: str, calls: int, threads: int, warm: bool = False, tensors: bool = False, device: str = "cpu",
    saved: str | None = None,
) -> dict[str, float]:
    import time

    import torch
    from torch_geometric.nn import GINEConv

    torch.set_num_threads(threads)
    batches = _batches(calls + 1, saved)
    torch.manual_seed(0)
    if which == "pyg":
        from torch_geometric.nn import GPSConv
    else:
        from attnmm.nn import GPSConv
    mlp = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
    attn_type = None if which == "local" else "multihead"  # "local": the layer less its attention, the bound
    options = {"recompute": True} if which == "recompute" else {}
    layer = GPSConv(64, GINEConv(mlp), heads=4, attn_type=attn_type, **options).train().to(device)
    cuda = device == "cuda"
    inputs = []
    for b in batches:
        g = torch.Generator().manual_seed(b.num_nodes)
        x = torch.randn(b.num_nodes, 64, generator=g).to(device).requires_grad_()
        edge_attr = torch.randn(b.edge_index.size(1), 64, generator=g)
        inputs.append((x, b.edge_index.to(device), b.batch.to(device), edge_attr.to(device)))

    def step(x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor, edge_attr: torch.Tensor) -> float:
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        layer(x, edge_index, batch, edge_attr=edge_attr).square().mean().backward()
        if cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    def measured(args: tuple[torch.Tensor, ...]) -> tuple[float, int]:
        if cuda:  # the allocator's peak over what the process held before: the tensors' peak
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            held = torch.cuda.memory_allocated()
            seconds = step(*args)
            return seconds, torch.cuda.max_memory_allocated() - held
        before = _status("VmRSS")
        _peak_reset()
        seconds = step(*args)
        return seconds, _status("VmHWM") - before

    if tensors:  # the tensors' peak in the first call and in the next
        first, steady = (_tensor_peak(lambda a=args: step(*a)) for args in inputs[:2])
        return {"first_tensors": first, "steady_tensors": steady}
    if warm:  # the first graph of the first batch alone, once
        x, edge_index, batch, edge_attr = inputs[0]
        n = int((batch == 0).sum())
        inner = (edge_index < n).all(0)
        step(x[:n].detach().requires_grad_(), edge_index[:, inner], batch[:n], edge_attr[inner])
    first, first_peak = measured(inputs[0])
    times, peaks = [], []
    for args in inputs[1:]:
        seconds, peak = measured(args)
        times.append(seconds)
        peaks.append(peak)
    return {"first_s": first, "first_peak": first_peak, "steady_s": statistics.median(times),
            "steady_peak": statistics.median(peaks), "nodes": statistics.mean(b.num_nodes for b in batches)}


def _measure(which: str, args: argparse.Namespace, env: dict[str, str], *flags: str) -> dict[str, float]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", which, "--calls", str(args.calls),
           "--threads", str(args.threads), "--device", args.device,
           *(["--batches", args.batches] if args.batches else []), *flags]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"the {which} measurement failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _shown(key: str, runs: list[dict[str, float]]) -> str:
    """The median of ``key`` over the rounds ``runs``, in seconds or MiB."""
    value = statistics.median(m[key] for m in runs)
    return f"{value:.3f} s" if key.endswith("_s") else f"{value / 2**20:.1f} MiB"


def markdown(stored: dict[str, Any]) -> str:
    """The page's table: medians over the alternating rounds of a stored run, PyG's over attnmm's."""
    local, again = stored.get("local"), stored.get("recompute")
    lines = ["| forward + backward of one layer | PyG `GPSConv` | attnmm `GPSConv` | PyG / attnmm |"
             + (" attnmm, `recompute=True` | PyG / that |" if again else "")
             + (" attnmm, no attention branch |" if local else ""),
             "|---|---:|---:|---:|" + ("---:|---:|" if again else "") + ("---:|" if local else "")]

    def ratio(key: str, ours: list[dict[str, float]]) -> str:
        pyg = statistics.median(m[key] for m in stored["pyg"])
        rounds = sorted(p[key] / max(o[key], 1e-12) for p, o in zip(stored["pyg"], ours, strict=True))
        median = pyg / max(statistics.median(m[key] for m in ours), 1e-12)
        return f"{median:.2f}x (rounds {rounds[0]:.2f}-{rounds[-1]:.2f})"

    for key, label in (("first_s", "time, first call"), ("steady_s", "time, steady state"),
                       ("first_peak", "peak memory, first call"),
                       ("warm_peak", "peak memory, first full-size call after a one-graph call"),
                       ("steady_peak", "peak memory, steady state"),
                       ("first_tensors", "tensor memory (the tensors' peak), first call"),
                       ("steady_tensors", "tensor memory (the tensors' peak), steady state")):
        if key not in stored["ours"][0]:
            continue
        lines.append(f"| {label} | {_shown(key, stored['pyg'])} | {_shown(key, stored['ours'])} | "
                     f"{ratio(key, stored['ours'])} |"
                     + (f" {_shown(key, again)} | {ratio(key, again)} |" if again else "")
                     + (f" {_shown(key, local)} |" if local else ""))
    nodes = statistics.mean(m["nodes"] for m in stored["ours"])
    where = (f"on the GPU ({stored['gpu']}), peak memory as the CUDA allocator counts it"
             if stored.get("device") == "cuda" else f"{stored['threads']} thread(s)")
    lines += ["", f"`GPSConv(64, GINEConv, heads=4)`, Peptides-func batches of 64 graphs (about {nodes:,.0f} nodes), "
              f"{where}, medians of {stored['rounds']} alternating rounds of fresh processes, "
              f"{stored['machine']}, code at `{stored['commit']}`."]
    return "\n".join(lines)


def render_page(page: str, stored: dict[str, Any]) -> str:
    from benchmarks._page import generated

    return generated(page, START, END, "python benchmarks/gps_conv.py", RESULTS, [markdown(stored)])


def render_cuda_page(page: str, stored: dict[str, Any]) -> str:
    from benchmarks._page import generated

    if CUDA_START not in page:  # the first measurement on a GPU: its section goes after the CPU table's
        intro = ("\n\nThe same layers on a GPU (`python benchmarks/gps_conv.py --device cuda`; time between CUDA "
                 "synchronisations,\npeak memory as the CUDA allocator counts it, which is the tensors' alone):\n\n")
        page = page.replace(END, END + intro + CUDA_START + "\n" + CUDA_END, 1)
    return generated(page, CUDA_START, CUDA_END, "python benchmarks/gps_conv.py --device cuda", CUDA_RESULTS,
                     [markdown(stored)])


def save_batches(path: str, count: int) -> None:
    """Write the structure of the first ``count`` batches, for a machine without the Peptides-func data."""
    import torch

    batches = _batches(count)
    torch.save([{"edge_index": b.edge_index, "batch": b.batch} for b in batches], path)
    print(f"wrote {count} batches ({sum(b.num_nodes for b in batches):,} nodes) to {path}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=8, help="steady-state calls per process")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--render-only", action="store_true", help="render the page's table from the store")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--batches", help="read the batches' structure from this file (see --save-batches)")
    parser.add_argument("--save-batches", metavar="FILE", help="write the batches' structure to FILE and stop")
    parser.add_argument("--child", choices=WHICH, help=argparse.SUPPRESS)
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--tensors", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.batches and not Path(args.batches).is_file():
        parser.error(f"--batches {args.batches}: no such file (write one with --save-batches where the data is)")
    cuda = args.device == "cuda"
    results, render = (CUDA_RESULTS, render_cuda_page) if cuda else (RESULTS, render_page)
    if args.save_batches:
        save_batches(args.save_batches, args.calls + 1)
        return
    if args.child:
        print(json.dumps(_child(args.child, args.calls, args.threads, args.warm, args.tensors, args.device,
                                args.batches)))
        return
    if args.render_only:
        stored = json.loads(results.read_text())
    elif cuda:
        import torch

        from benchmarks._measure import commit, machine_line

        if not torch.cuda.is_available():
            parser.error("--device cuda: torch sees no CUDA device")
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        runs: dict[str, list[dict[str, float]]] = {which: [] for which in WHICH}
        for r in range(args.rounds):
            for which in (WHICH if r % 2 == 0 else WHICH[::-1]):
                runs[which].append(_measure(which, args, env))
            print(f"round {r + 1}: " + ", ".join(
                f"{w} first {runs[w][-1]['first_s']:.3f} s, steady {runs[w][-1]['steady_s']:.4f} s" for w in runs),
                flush=True)
        stored = {"machine": machine_line(), "commit": commit(), "threads": args.threads, "rounds": args.rounds,
                  "calls": args.calls, "device": "cuda", "gpu": torch.cuda.get_device_name(), **runs}
    else:
        from benchmarks._measure import commit, machine_line

        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        got: dict[str, list[dict[str, float]]] = {which: [] for which in WHICH}
        mapped = {**env, "MALLOC_MMAP_THRESHOLD_": str(128 * 1024)}
        for r in range(args.rounds):
            for which in (WHICH if r % 2 == 0 else WHICH[::-1]):
                timed = _measure(which, args, env)
                memory = _measure(which, args, mapped)
                warm = _measure(which, args, mapped, "--warm")
                tensors = _measure(which, args, env, "--tensors")
                got[which].append({**timed, "first_peak": memory["first_peak"], "steady_peak": memory["steady_peak"],
                                   "warm_peak": warm["first_peak"], **tensors})
            print(f"round {r + 1}: " + ", ".join(
                f"{w} first {got[w][-1]['first_s']:.3f} s, steady {got[w][-1]['steady_s']:.3f} s" for w in got),
                flush=True)
        stored = {"machine": machine_line(), "commit": commit(), "threads": args.threads, "rounds": args.rounds,
                  "calls": args.calls, **got}
    print(markdown(stored))
    if args.no_write:
        return
    from benchmarks._page import publish

    publish(stored, results, PAGE, render)


if __name__ == "__main__":
    main()
