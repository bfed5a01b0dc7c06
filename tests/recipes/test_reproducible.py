"""The same seed gives the same ``metrics.json`` on CPU, byte for byte."""

from __future__ import annotations

from pathlib import Path

from _recipes import run_recipe

TINY = [
    "--data.num_graphs=80", "--data.num_nodes=8", "--data.batch_size=8", "--trainer.max_epochs=2",
    "--model.adapter.init_args.d_model=16",  # the encoder's and the head's too (linked)
    "--model.encoder.init_args.num_layers=1", "--model.encoder.init_args.heads=2",
    "--torch_threads=1", "--trainer.enable_model_summary=false",
]


def _metrics(cwd: Path, seed: int, fresh: bool = True) -> bytes:
    cwd.mkdir()
    run_recipe("graph_graph", ["fit", *TINY, f"--seed_everything={seed}"], cwd, fresh=fresh)
    (path,) = cwd.glob("runs/**/metrics.json")
    return path.read_bytes()


def test_same_seed_same_metrics(tmp_path: Path) -> None:
    """Two new interpreters (each its own hash seed, as two runs of a user's); the other seed's run only shows
    that the comparison is not vacuous (run by the recipe server: no interpreter start)."""
    first, second = _metrics(tmp_path / "a", 0), _metrics(tmp_path / "b", 0)
    assert first == second
    assert _metrics(tmp_path / "c", 1, fresh=False) != first  # the seed matters: the comparison is not vacuous
