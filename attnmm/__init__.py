"""attnmm: one attention core with pluggable masks for graphs, speech, images and text."""

from attnmm import masks
from attnmm.attention import AttentionWeights, attend

__version__ = "0.1.0"

__all__ = ["AttentionWeights", "attend", "masks", "__version__"]
