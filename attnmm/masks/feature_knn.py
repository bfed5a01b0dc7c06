"""Deprecated path: this module is now ``attnmm.common.feature_knn``, which the old name stands for."""

from attnmm._moved import stand_in

stand_in(__name__, "attnmm.common.feature_knn")
