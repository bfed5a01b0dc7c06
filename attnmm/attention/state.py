"""Deprecated path: this module is now ``attnmm.nn.state``, which the old name stands for."""

import sys
import warnings

from attnmm.nn import state as _new

warnings.warn(f"{__name__} is deprecated; import from {_new.__name__}", FutureWarning, stacklevel=2)
sys.modules[__name__] = _new
