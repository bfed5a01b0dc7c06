"""Mask sweep on PROTEINS (the graph studies' shared code: :mod:`studies._graphs.mask_sweep`)."""
from studies._graphs.mask_sweep import context, resolve, run, summary  # noqa: F401
