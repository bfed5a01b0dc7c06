"""AttentionMapPNG: one PNG per encoder layer of the kept batch's first item, the heads' mean."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from attnmm.adapters import SpeechAdapter
from attnmm.lightning import AttentionMapPNG, ClassificationTask
from attnmm.lightning.callbacks import _first_item_weights
from attnmm.masks import Window
from attnmm.nn import Encoder, PoolingClassifier


def test_one_png_per_layer_once(tmp_path: Path) -> None:
    task = ClassificationTask(
        SpeechAdapter(d_model=16, channels=4, mask=Window(3, 1)), Encoder(16, 2, 3, 32), PoolingClassifier(16, 4), 4
    )
    callback = AttentionMapPNG(max_tokens=8)
    trainer = SimpleNamespace(sanity_checking=False)
    callback.on_validation_batch_end(trainer, task, None, SpeechAdapter.example_batch(2), 0)
    paths = callback.save(task, tmp_path)
    assert [p.name for p in paths] == ["attention_layer0.png", "attention_layer1.png", "attention_layer2.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert callback.save(task, tmp_path / "again") == [] and callback.skipped == "no batch was kept"  # once per run


def test_graph_layer_weights_become_a_dense_map() -> None:
    """A graph layer's ``(edge_index, alpha)`` (source, target): row = target (query), column = source (key)."""
    tokens = SimpleNamespace(x=torch.zeros(3, 4))
    edge_index = torch.tensor([[0, 1, 2], [1, 2, 2]])
    alpha = torch.tensor([[1.0, 0.5], [0.25, 0.5], [0.75, 0.5]])  # (M, H)
    dense = _first_item_weights(tokens, (edge_index, alpha))
    assert dense.shape == (2, 3, 3)
    assert dense[0, 1, 0] == 1.0 and dense[0, 2, 1] == 0.25 and dense[0, 2, 2] == 0.75
    assert dense.sum() == alpha.sum()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (a batch kept on the GPU)")
def test_a_batch_kept_on_the_gpu_is_drawn_by_a_module_moved_back(tmp_path: Path) -> None:
    # after a fit or test Lightning moves the module back to the CPU; the batch kept stays where it was
    task = ClassificationTask(
        SpeechAdapter(d_model=16, channels=4, mask=Window(3, 1)), Encoder(16, 2, 2, 32), PoolingClassifier(16, 4), 4
    )
    callback = AttentionMapPNG(max_tokens=8)
    batch = {k: v.cuda() if isinstance(v, torch.Tensor) else v for k, v in SpeechAdapter.example_batch(2).items()}
    callback.on_validation_batch_end(SimpleNamespace(sanity_checking=False), task, None, batch, 0)
    assert len(callback.save(task, tmp_path)) == 2
