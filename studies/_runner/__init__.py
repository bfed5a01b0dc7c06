"""The study runner: protocols as data, stores, the checks that keep a protocol, and generated pages.
See studies/README.md for how a study plugs in."""

from .protocol import Items, Protocol, ProtocolError, check_disjoint, check_unscored, protocol_hash
from .render import View, mean_std, render, table
from .store import Store
from .study import Sets, Study

__all__ = ["Items", "Protocol", "ProtocolError", "Sets", "Store", "Study", "View", "check_disjoint",
           "check_unscored", "mean_std", "protocol_hash", "render", "table"]
