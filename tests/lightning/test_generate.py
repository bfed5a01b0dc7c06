"""Sampling from a causal model: context window, temperature 0, top-k, and the sample callback."""

from __future__ import annotations

import pytest
import torch

from attnmm._checks import refuse_encoder_options
from attnmm.adapters import TextAdapter
from attnmm.lightning import ClassificationTask, Ensemble, MultiClass
from attnmm.lightning.generate import generate
from attnmm.masks import Causal, Window
from attnmm.nn import Encoder, RecurrentEncoder, RotaryPE, TokenClassifier

V, D = 11, 16


def _next_is_plus_one(vocab: int = 10):
    seen: list[int] = []

    def model(batch: dict[str, torch.Tensor], state=None) -> torch.Tensor:
        ids = batch["tokens"]
        seen.append(ids.size(1))
        return torch.nn.functional.one_hot((ids + 1) % vocab, vocab).float() * 10  # (B, L, V)

    return model, seen


def test_greedy_follows_the_model_and_crops_the_context() -> None:
    model, seen = _next_is_plus_one()
    out = generate(model, torch.tensor([3, 4, 5]), 5, context=2, temperature=0.0, cache=False)
    assert out.tolist() == [3, 4, 5, 6, 7, 8, 9, 0]
    assert seen == [2] * 5  # uncached: the last `context` tokens at every step
    seen.clear()
    assert torch.equal(generate(model, torch.tensor([3, 4, 5]), 5, context=2, temperature=0.0), out)
    assert seen == [2, 1, 1, 1, 1]  # cached: the cropped prompt once, then each new token


def test_top_1_equals_greedy_and_batches_work() -> None:
    model, _ = _next_is_plus_one()
    prompt = torch.tensor([[1, 2], [7, 8]])
    sampled = generate(model, prompt, 3, context=4, temperature=1.0, top_k=1)
    assert torch.equal(sampled, generate(model, prompt, 3, context=4, temperature=0.0))
    assert sampled.shape == (2, 5)


def test_errors() -> None:
    model, _ = _next_is_plus_one()
    with pytest.raises(ValueError, match="prompt must be \\(T,\\) or \\(B, T\\) token ids with T >= 1"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2, context=4)
    with pytest.raises(ValueError, match="temperature must be >= 0, got -1"):
        generate(model, torch.tensor([1]), 2, context=4, temperature=-1)


def _lm(positional: str, mask, encoder: str = "attention", ensemble: int = 1) -> ClassificationTask:
    torch.manual_seed(0)
    adapter = TextAdapter(vocab_size=V, d_model=D, positional=positional, max_len=64, mask=mask, dropout=0.0)
    rotary = RotaryPE(D // 4) if positional == "rotary" else None
    enc = Encoder(D, 4, 2, 32, dropout=0.0, rotary=rotary) if encoder == "attention" else RecurrentEncoder(D, 2)
    objective = MultiClass(target_key="targets")
    task = ClassificationTask(adapter, enc, TokenClassifier(D, V), V, objective)
    return (task if ensemble == 1 else Ensemble(task, ensemble)).eval().double()


MODELS = {
    "rotary, causal": lambda: _lm("rotary", Causal()),
    "sinusoidal, causal window": lambda: _lm("sinusoidal", Window(3, 0)),
    "learned, causal": lambda: _lm("learned", Causal()),
    "rotary, ensemble of 2": lambda: _lm("rotary", Causal(), ensemble=2),
    "lstm": lambda: _lm("none", Causal(), encoder="lstm"),
}


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_key_value_cache_gives_the_uncached_output(name: str, temperature: float) -> None:
    model = MODELS[name]()
    prompt = torch.randint(2, V, (2, 4))
    out = {}
    for cache in (True, False):
        rng = torch.Generator().manual_seed(5)
        out[cache] = generate(model, prompt, 20, context=24, temperature=temperature, generator=rng, cache=cache)
    assert torch.equal(out[True], out[False])


def test_past_the_context_the_cache_attends_the_last_context_keys() -> None:
    model = _lm("rotary", Causal())
    prompt = torch.randint(2, V, (1, 3))
    cached = generate(model, prompt, 30, context=8, temperature=0.0)
    # the same model under Causal & Window(7, 0), reading the whole output at every step
    windowed = _lm("rotary", Causal() & Window(7, 0))
    assert torch.equal(cached, generate(windowed, prompt, 30, context=1000, temperature=0.0, cache=False))
    assert not torch.equal(cached, generate(model, prompt, 30, context=8, temperature=0.0, cache=False))


def test_an_encoder_without_state_asks_for_cache_false() -> None:
    class Plain(torch.nn.Module):  # the shared encoder call, refusing state as the library's encoders do
        def forward(self, x, mask=None, *, tokens=None, state=None, return_weights=False):
            refuse_encoder_options(self, state, return_weights)
            return x

    task = ClassificationTask(TextAdapter(vocab_size=V, d_model=D, mask=Causal()), Plain(), TokenClassifier(D, V), V)
    with pytest.raises(ValueError, match="Plain cannot read a sequence incrementally .*cache=False"):
        generate(task, torch.tensor([2, 3]), 2, context=4)
    assert generate(task, torch.tensor([2, 3]), 2, context=4, cache=False).shape == (4,)
