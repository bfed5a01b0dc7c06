"""Argument checks shared across the package (masks, adapters, layers, data and tasks)."""

from __future__ import annotations

import numbers
from typing import Any


def check_nonneg_int(name: str, value: object, minimum: int = 0) -> int:
    """Return ``value`` as an int, or raise naming the expected and the actual value."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value}")
    return int(value)


def refuse_encoder_options(encoder: object, state: object = None, return_weights: bool = False) -> None:
    """Refuse, naming the encoder and the fix, the options of the shared encoder call
    ``encoder(x, mask, *, tokens=None, state=None, return_weights=False)`` that it does not honour
    (pass ``state`` or ``return_weights`` only for the options it lacks)."""
    name = type(encoder).__name__
    if state is not None:
        raise ValueError(
            f"{name} cannot read a sequence incrementally (state=): call it without state, e.g. "
            "generate(..., cache=False)"
        )
    if return_weights:
        raise ValueError(
            f"{name} does not return attention weights (return_weights=True): call it without, e.g. "
            "leave out the AttentionMapLogger callback"
        )



def as_whole_numbers(name: str, values: object, shape: str) -> Any:
    """``values``, a tensor or a (nested) list or tuple of ints, as a tensor; a list holding anything but
    whole numbers (a float such as 5.5 or even 10.0, a bool) is refused naming the value, never rounded.
    ``shape`` names the expected shape in the message, e.g. ``"(B,)"``. A tensor is returned as given,
    for its caller to check its dtype (as is anything else torch reads, e.g. a NumPy array)."""
    import torch

    if isinstance(values, torch.Tensor):
        return values
    if not isinstance(values, (list, tuple)):
        return torch.as_tensor(values)  # e.g. a NumPy array: its dtype tells, as a tensor's does

    def whole(v: object) -> bool:
        if isinstance(v, torch.Tensor):
            return v.dim() == 0 and not (v.is_floating_point() or v.is_complex() or v.dtype == torch.bool)
        return isinstance(v, numbers.Integral) and not isinstance(v, bool)

    stack: list[object] = [values]
    while stack:
        item = stack.pop()
        if isinstance(item, (list, tuple)):
            stack.extend(reversed(item))  # first value first
        elif not whole(item):
            raise TypeError(
                f"{name} must be whole numbers (ints) of shape {shape}, got {type(item).__name__} {item} in "
                f"{values!r:.80}; they count positions, so round them first if that is meant"
            )
    return torch.as_tensor(values, dtype=torch.long)


def check_features(
    layer: str, name: str, x: object, width: int, param: str, shapes: dict[int, str], hint: str = ""
) -> None:
    """Refuse the input ``x`` of ``layer``'s forward unless it is a floating-point tensor of one of the
    ranks of ``shapes`` (rank -> the expected shape, its last dim the width, e.g. ``{3: "(B, L, 32)"}``)
    with ``width`` features in its last dim; the message names the layer, the constructor parameter
    ``param`` that fixed the width, the expected shapes and the actual one, and the fix (``hint`` for a
    wrong rank)."""
    import torch

    expected = " or ".join(shapes.values())
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{layer}: {name} must be a Tensor of shape {expected}, got {type(x).__name__}")
    shape = tuple(x.shape)
    if x.dim() not in shapes:
        raise ValueError(
            f"{layer}: {name} must have shape {expected}, got a {x.dim()}-D tensor of shape {shape}"
            + (f"; {hint}" if hint else "")
        )
    if x.size(-1) != width:
        raise ValueError(
            f"{layer} was built with {param}={width}, so {name} must have {width} features in its last dim, "
            f"shape {shapes[x.dim()]}, got shape {shape}; build it with {param}={x.size(-1)} or project {name} "
            f"to {width} features first"
        )
    if not x.is_floating_point():
        raise TypeError(
            f"{layer}: {name} must be a floating-point tensor of shape {shapes[x.dim()]}, got dtype {x.dtype}; "
            "cast it with .float(), or embed ids first (e.g. nn.Embedding or attnmm.nn.CategoricalEncoder)"
        )
