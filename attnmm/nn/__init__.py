"""PyG-facing layers built on the attention core: AttentionConv (a drop-in for PyG's TransformerConv),
a graph attention encoder, predict-then-propagate over a mask, a GPS graph transformer layer and a
shortest-path score bias; the recurrent baseline of the attention encoders; and the
convolution-as-attention construction with its CNN baseline."""

from attnmm.nn.attention_conv import AttentionConv
from attnmm.nn.conv_attention import ConvAsAttention
from attnmm.nn.conv_encoder import ConvEncoder
from attnmm.nn.gps import GPSEncoder, GPSLayer
from attnmm.nn.graph_encoder import GraphAttentionEncoder
from attnmm.nn.propagation import PropagationEncoder
from attnmm.nn.recurrent import RecurrentEncoder
from attnmm.nn.spd_bias import ShortestPathBias

__all__ = [
    "AttentionConv",
    "ConvAsAttention",
    "ConvEncoder",
    "GPSEncoder",
    "GPSLayer",
    "GraphAttentionEncoder",
    "PropagationEncoder",
    "RecurrentEncoder",
    "ShortestPathBias",
]
