"""Deprecated path: this module is now ``attnmm.common.feature_knn``, which the old name stands for."""

import importlib
import sys
import warnings

_new = importlib.import_module("attnmm.common.feature_knn")
warnings.warn(f"{__name__} is deprecated; import from {_new.__name__}", FutureWarning, stacklevel=2)
sys.modules[__name__] = _new
