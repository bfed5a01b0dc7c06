"""The attention core: attend(), its backends, multi-head attention, positional encodings, encoders."""

from attnmm.attention.core import attend
from attnmm.attention.weights import AttentionWeights

__all__ = ["AttentionWeights", "attend"]
