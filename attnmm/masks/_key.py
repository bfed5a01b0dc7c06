"""Content keys of masks, for caches of their derived forms (pairs, CSR patterns, dense and block masks).

Adapters build a new mask per batch, so a cache keyed by ``id(mask)`` never hits across batches and
misses whenever two equal masks are separate objects. :func:`content_key` describes a mask by what it
is: its type and every attribute, tensors by dtype, shape and values. Two masks with equal keys have
the same allowed sets (masks are immutable definitions).
"""

from __future__ import annotations

from collections.abc import Hashable

import torch
from torch import Tensor

#: Tensors up to this many elements (on CPU) are keyed by their values; larger ones, and tensors on
#: other devices (whose values would need a device synchronisation), by identity and version, so
#: they hit only for the same tensor object unchanged (then the cache must hold the object).
VALUE_KEY_ELEMENTS = 1 << 20


#: Dtypes numpy cannot hold, read as integers of their width.
_AS_INT = {torch.bfloat16: torch.int16}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _AS_INT[getattr(torch, _name)] = torch.uint8


def content_key(obj: object) -> Hashable:
    """A hashable key equal for objects of equal content: masks by type and attributes, tensors by
    values (see :data:`VALUE_KEY_ELEMENTS`), containers item by item, other objects by identity."""
    if isinstance(obj, Tensor):
        return _tensor_key(obj)
    if obj is None or isinstance(obj, (bool, int, float, str, torch.dtype, torch.device)):
        return obj
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, *(content_key(x) for x in obj))
    if isinstance(obj, dict):
        return ("dict", *((k, content_key(v)) for k, v in sorted(obj.items())))
    from attnmm.masks.base import Mask

    if isinstance(obj, Mask):
        return (type(obj), *((name, content_key(v)) for name, v in sorted(vars(obj).items())))
    return ("id", id(obj))


def _tensor_key(t: Tensor) -> Hashable:
    if t.device.type == "cpu" and t.numel() <= VALUE_KEY_ELEMENTS and t.layout == torch.strided:
        flat = t.detach().contiguous()
        if flat.dtype in _AS_INT:  # dtypes numpy lacks: the same bits as integers
            flat = flat.view(_AS_INT[flat.dtype])
        return ("tensor", t.dtype, tuple(t.shape), flat.numpy().tobytes())
    return ("tensor-id", id(t), t._version, t.dtype, tuple(t.shape), str(t.device))
