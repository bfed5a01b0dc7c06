"""Deprecated path: this module is now ``attnmm.attention.backends._split``, which the old name stands for."""

from attnmm._moved import stand_in

stand_in(__name__, "attnmm.attention.backends._split")
