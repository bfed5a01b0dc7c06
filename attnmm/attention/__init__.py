"""The attention core: attend(), its backends, multi-head attention, positional encodings, encoders."""

from attnmm.attention.backends._memory import AttentionMemoryError
from attnmm.attention.core import attend
from attnmm.attention.encoder import Encoder, EncoderLayer
from attnmm.attention.multihead import MultiHeadAttention
from attnmm.attention.planner import AttentionPlan, Plan
from attnmm.attention.positional import LearnedPE, RotaryPE, Sinusoidal2DPE, SinusoidalPE, sinusoid
from attnmm.attention.problem import Problem
from attnmm.attention.relative import RelativePositionBias
from attnmm.attention.state import IncrementalState
from attnmm.attention.weights import AttentionWeights

__all__ = [
    "AttentionPlan",
    "AttentionMemoryError",
    "AttentionWeights",
    "Encoder",
    "EncoderLayer",
    "IncrementalState",
    "LearnedPE",
    "MultiHeadAttention",
    "Plan",
    "Problem",
    "RelativePositionBias",
    "RotaryPE",
    "Sinusoidal2DPE",
    "SinusoidalPE",
    "attend",
    "sinusoid",
]
