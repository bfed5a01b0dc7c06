"""TU splits: the graph studies' shared split runner (:mod:`studies._graphs.splits`)."""
from studies._graphs.splits import context, resolve, run  # noqa: F401
