"""TU splits: the code is the graph studies' shared split runner (:mod:`studies._graphs.splits`)."""

from studies._graphs.splits import render, resolve, run

__all__ = ["render", "resolve", "run"]
