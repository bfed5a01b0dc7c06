"""Backends of the attention core, registered by name.

A backend is one file: a :class:`Backend` subclass declaring what it computes (:class:`Supports`)
and how, registered here (or by its own module) with :func:`register_backend`. Dispatch and the
tests read the registry and the declarations; nothing else names a backend.
"""

from __future__ import annotations

from attnmm.attention.backends._registry import get_backend, list_backends, register_backend, unregister_backend
from attnmm.attention.backends.band import BandBackend
from attnmm.attention.backends.base import Backend, BackendRefusedError, Supports
from attnmm.attention.backends.flex import FlexBackend
from attnmm.attention.backends.masked_sdpa import MaskedSDPABackend
from attnmm.attention.backends.reference import ReferenceBackend
from attnmm.attention.backends.sdpa import SDPABackend
from attnmm.attention.backends.segments import SegmentsBackend
from attnmm.attention.backends.sparse import SparseBackend
from attnmm.attention.problem import GradSinks

for _backend in (ReferenceBackend, SDPABackend, SparseBackend, BandBackend, MaskedSDPABackend, FlexBackend,
                 SegmentsBackend):
    register_backend(_backend())

__all__ = ["BandBackend", "Backend", "BackendRefusedError", "FlexBackend", "GradSinks", "MaskedSDPABackend",
           "ReferenceBackend", "SDPABackend", "SegmentsBackend", "SparseBackend", "Supports", "get_backend",
           "list_backends", "register_backend", "unregister_backend"]
