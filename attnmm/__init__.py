"""attnmm: one attention core with pluggable masks for graphs, speech, images and text."""

from attnmm import masks
from attnmm.attention import AttentionWeights, attend
from attnmm.nn import (
    Encoder,
    EncoderLayer,
    LearnedPE,
    MultiHeadAttention,
    RelativePositionBias,
    RotaryPE,
    Sinusoidal2DPE,
    SinusoidalPE,
)

__version__ = "0.1.0"

__all__ = ["AttentionWeights", "Encoder", "EncoderLayer", "LearnedPE", "MultiHeadAttention", "RelativePositionBias",
           "RotaryPE", "Sinusoidal2DPE", "SinusoidalPE", "attend", "masks", "__version__"]
