"""Deprecated path: this module is now ``attnmm.nn.state``, which the old name stands for."""

from attnmm._moved import stand_in

stand_in(__name__, "attnmm.nn.state")
