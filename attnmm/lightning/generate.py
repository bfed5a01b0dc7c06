r"""Sampling from a causal language model, and a callback that prints a sample after training."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_only
from torch import Tensor

from attnmm._checks import check_nonneg_int
from attnmm.nn.state import IncrementalState

__all__ = ["TextSample", "generate"]


@torch.no_grad()
def generate(
    model: Callable[..., Tensor],
    prompt: Tensor,
    num_tokens: int,
    context: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    cache: bool = True,
) -> Tensor:
    r"""Extend ``prompt`` by ``num_tokens`` tokens sampled one at a time from a causal model.

    .. math::
        w_{t+1} \sim \mathrm{softmax}\big(\mathbf{z}_t / \tau\big), \qquad
        \mathbf{z}_t = \mathrm{model}(w_{t - \mathrm{context} + 1}, \dots, w_t)_{\text{last}}

    Sampling uses the last position's logits, scaled by the temperature :math:`\tau` and, with
    ``top_k``, restricted to the ``top_k`` likeliest tokens. Each step attends at most ``context``
    tokens (the window the model was trained on).

    With ``cache`` (the default) the model reads the prompt once and then one new token per step,
    its attention layers keeping their keys and values in an
    :class:`~attnmm.nn.IncrementalState` (recurrent layers their hidden state): a step costs
    one token's pass instead of ``context`` tokens'. While prompt and output fit in ``context``
    tokens the result equals the uncached one; past that, each layer attends its last ``context``
    keys (the model's mask intersected with ``Window(context - 1, 0)``), where the uncached model
    re-reads the last ``context`` tokens from scratch at every step, so the two differ. The model
    must accept ``model(batch, state)`` with a batch ``{"tokens": ids, "offset": t}`` of the new
    tokens and their first position, as :class:`~attnmm.lightning.ClassificationTask` does with a
    causal :class:`~attnmm.nn.Encoder` or :class:`~attnmm.nn.RecurrentEncoder`.

    Args:
        model (callable): ``model({"tokens": ids}) -> logits`` with ids (B, L) and logits (B, L, V),
            e.g. a :class:`~attnmm.lightning.ClassificationTask` whose adapter uses a causal mask;
            with ``cache``, ``model(batch, state)``.
        prompt (LongTensor): the token ids to start from, (T,) or (B, T), T >= 1.
        num_tokens (int): tokens to add.
        context (int): most tokens the model sees per step.
        temperature (float, optional): softmax temperature; ``0`` picks the likeliest token.
            (default: :obj:`1.0`)
        top_k (int, optional): sample among the ``top_k`` likeliest tokens only. (default: :obj:`None`)
        generator (torch.Generator, optional): random source of the draws. (default: :obj:`None`)
        cache (bool, optional): read incrementally with key/value caches. (default: :obj:`True`)

    Returns:
        LongTensor: the prompt and the new tokens, (T + num_tokens,) or (B, T + num_tokens).

    Examples:
        >>> import torch
        >>> uniform = lambda batch, state=None: torch.zeros(*batch["tokens"].shape, 5)  # (B, L, V)
        >>> generate(uniform, torch.tensor([1, 2]), 4, context=8, generator=torch.Generator().manual_seed(0)).shape
        torch.Size([6])
    """
    num_tokens = check_nonneg_int("num_tokens", num_tokens)
    context = check_nonneg_int("context", context, minimum=1)
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    single = prompt.dim() == 1
    ids = prompt.unsqueeze(0) if single else prompt  # (B, T)
    if ids.dim() != 2 or ids.size(1) < 1:
        raise ValueError(f"prompt must be (T,) or (B, T) token ids with T >= 1, got shape {tuple(prompt.shape)}")
    state = IncrementalState(max_keys=context) if cache else None
    new = ids[:, -context:]  # (B, T'): what the model has not read yet
    for _ in range(num_tokens):
        if state is None:
            logits = model({"tokens": ids[:, -context:]})[:, -1].float()  # (B, V)
        else:
            logits = model({"tokens": new, "offset": state.offset}, state)[:, -1].float()  # (B, V)
            state.advance(new.size(1))
        if temperature == 0:
            nxt = logits.argmax(-1, keepdim=True)  # (B, 1)
        else:
            logits = logits / temperature
            if top_k is not None and top_k < logits.size(-1):
                kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
                logits = logits.masked_fill(logits < kth, float("-inf"))
            probs = logits.softmax(-1)
            nxt = torch.multinomial(probs.cpu(), 1, generator=generator).to(ids.device)  # (B, 1)
        ids, new = torch.cat([ids, nxt], dim=1), nxt  # (B, T + 1)
    return ids[0] if single else ids


class TextSample(L.Callback):
    r"""Prints a text sampled from the trained language model when training ends.

    The datamodule must offer ``encode(text) -> ids``, ``decode(ids) -> text`` and ``block_size``
    (as :class:`~attnmm.data.ShakespeareDataModule` does); the model is sampled with
    :func:`generate` on its last ``block_size`` tokens. Under ``fast_dev_run`` the sample is cut
    to 20 tokens. The text is kept in :attr:`text`.

    Args:
        prompt (str, optional): the text to continue. (default: :obj:`"\\n"`)
        num_tokens (int, optional): tokens to generate. (default: :obj:`300`)
        temperature (float, optional): softmax temperature. (default: :obj:`0.8`)
        top_k (int, optional): sample among the ``top_k`` likeliest tokens. (default: :obj:`None`)
        seed (int, optional): seed of the draws. (default: :obj:`0`)
    """

    def __init__(
        self, prompt: str = "\n", num_tokens: int = 300, temperature: float = 0.8, top_k: int | None = None,
        seed: int = 0,
    ) -> None:
        super().__init__()
        if not prompt:
            raise ValueError("prompt must hold at least one character")
        self.prompt, self.num_tokens = prompt, check_nonneg_int("num_tokens", num_tokens)
        self.temperature, self.top_k, self.seed = temperature, top_k, seed
        self.text: str | None = None

    def sample(self, model: Any, datamodule: Any, num_tokens: int | None = None) -> str:
        """The prompt and its continuation by ``model`` (``num_tokens`` overrides the setting)."""
        was_training = model.training
        model.eval()
        prompt = datamodule.encode(self.prompt).to(model.device)
        n = self.num_tokens if num_tokens is None else num_tokens
        rng = torch.Generator().manual_seed(self.seed)
        ids = generate(model, prompt, n, datamodule.block_size, self.temperature, self.top_k, rng)
        model.train(was_training)
        return datamodule.decode(ids)

    @rank_zero_only
    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        smoke = bool(getattr(trainer, "fast_dev_run", False))
        n = min(self.num_tokens, 20) if smoke else self.num_tokens  # a smoke run: a short sample
        self.text = self.sample(pl_module, trainer.datamodule, n)  # type: ignore[attr-defined]
        print(f"\n--- sample ({n} tokens, temperature {self.temperature}) ---\n{self.text}\n---")
