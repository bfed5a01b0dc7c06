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
#: they hit only for the same tensor object unchanged (then the cache must hold the object). A key
#: with such a part is not :func:`keyed_by_value`: an edit the version counter does not see (through
#: ``.data``, NumPy or DLPack) would leave it unchanged. Inference tensors (made under
#: ``torch.inference_mode``, as Lightning's validation and test loops make their batches) have no version
#: counter: up to this size they are keyed by value on any device (a copy to the CPU), larger ones by
#: identity alone.
VALUE_KEY_ELEMENTS = 1 << 20


class _ByIdentity(tuple):  # type: ignore[type-arg]
    """The part of a key that names an object by identity, not by value."""

    __slots__ = ()


#: Dtypes numpy cannot hold, read as integers of their width.
_AS_INT = {torch.bfloat16: torch.int16}
for _name in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz"):
    if hasattr(torch, _name):
        _AS_INT[getattr(torch, _name)] = torch.uint8


def content_key(obj: object) -> Hashable:
    """A hashable key equal for objects of equal content: masks by type and attributes, tensors by
    values (see :data:`VALUE_KEY_ELEMENTS`), containers item by item, other objects by identity."""
    return _content_key(obj, [])


def value_key(obj: object) -> Hashable | None:
    """:func:`content_key` when it describes ``obj`` by value alone, else ``None``: when some part of it
    names an object by identity (a large or accelerator tensor, an object of another kind), an equal key
    would not mean equal content after an edit the version counter does not see."""
    by_identity: list[bool] = []
    key = _content_key(obj, by_identity)
    return None if by_identity else key


def keyed_by_value(key: Hashable) -> bool:
    """Whether a :func:`content_key` describes its object by value alone (no part of it names an object
    by identity)."""
    if isinstance(key, _ByIdentity):
        return False
    if isinstance(key, tuple):
        return all(keyed_by_value(part) for part in key)
    return True


def _content_key(obj: object, by_identity: list[bool]) -> Hashable:
    if isinstance(obj, Tensor):
        small = obj.numel() <= VALUE_KEY_ELEMENTS and obj.layout == torch.strided
        # an inference tensor has no version counter: a small one is keyed by value wherever it is (one copy
        # to the CPU), a large one by identity alone
        if small and (obj.device.type == "cpu" or obj.is_inference()):
            flat = obj.detach().contiguous().cpu()
            if flat.dtype in _AS_INT:  # dtypes numpy lacks: the same bits as integers
                flat = flat.view(_AS_INT[flat.dtype])
            return ("tensor", obj.dtype, tuple(obj.shape), flat.numpy().tobytes())
        by_identity.append(True)
        version = "inference" if obj.is_inference() else obj._version
        return _ByIdentity(("tensor-id", id(obj), version, obj.dtype, tuple(obj.shape), str(obj.device)))
    if obj is None or isinstance(obj, (bool, int, float, str, torch.dtype, torch.device)):
        return obj
    if isinstance(obj, (tuple, list)):
        return (type(obj).__name__, *(_content_key(x, by_identity) for x in obj))
    if isinstance(obj, dict):
        return ("dict", *((k, _content_key(v, by_identity)) for k, v in sorted(obj.items())))
    from attnmm.masks.base import Mask

    if isinstance(obj, Mask):
        return (type(obj), *((name, _content_key(v, by_identity)) for name, v in sorted(vars(obj).items())))
    by_identity.append(True)
    return _ByIdentity(("id", id(obj)))
