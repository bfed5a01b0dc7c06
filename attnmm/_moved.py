"""Old import paths of moved modules: each old module stands for the new one and warns, naming it."""

import importlib
import sys
import warnings


def stand_in(old: str, new: str) -> None:
    """Make the module being imported as ``old`` the module ``new``, with a warning naming ``new``."""
    warnings.warn(f"{old} is deprecated; import from {new}", FutureWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)
