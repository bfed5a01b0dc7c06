from __future__ import annotations

import torch

from attnmm.adapters import SpeechAdapter
from attnmm.lightning import AttentionMapLogger, ClassificationTask
from attnmm.masks import Window
from attnmm.nn import Encoder, PoolingClassifier


def test_attention_map_figures() -> None:
    task = ClassificationTask(
        SpeechAdapter(d_model=16, channels=4, mask=Window(3, 1)), Encoder(16, 2, 2, 32), PoolingClassifier(16, 4), 4
    )
    task.train()
    figs = AttentionMapLogger(layer=1, head=1, max_tokens=10).figures(task, SpeechAdapter.example_batch(2))
    assert set(figs) == {"attention_map", "mask"}
    image = figs["attention_map"].axes[0].images[0].get_array()
    assert image.shape == (10, 10)
    # weights of a softmax: rows sum to one (the last row's look-ahead key is cropped), zero outside the window
    assert torch.allclose(torch.as_tensor(image.sum(1))[:9], torch.ones(9), atol=1e-5)
    allowed = Window(3, 1).dense(10)
    assert (torch.as_tensor(image)[~allowed] == 0).all()
    assert task.training  # restored
