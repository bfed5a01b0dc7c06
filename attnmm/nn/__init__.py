"""PyG-facing layers built on the attention core: AttentionConv (a drop-in for PyG's TransformerConv),
GATConv and GATv2Conv (drop-ins for PyG's layers of the same names), a graph attention encoder,
predict-then-propagate over a mask, a GPS graph transformer layer and a shortest-path score bias;
the recurrent baseline of the attention encoders; and the convolution-as-attention construction with
its CNN baseline."""

from attnmm.nn.attention_conv import AttentionConv
from attnmm.nn.conv_attention import ConvAsAttention
from attnmm.nn.conv_encoder import ConvEncoder
from attnmm.nn.gat_conv import GATConv
from attnmm.nn.gatv2_conv import GATv2Conv
from attnmm.nn.gps import GPSEncoder, GPSLayer
from attnmm.nn.graph_encoder import GraphAttentionEncoder
from attnmm.nn.propagation import PropagationEncoder
from attnmm.nn.recurrent import RecurrentEncoder
from attnmm.nn.spd_bias import ShortestPathBias

__all__ = [
    "AttentionConv",
    "ConvAsAttention",
    "ConvEncoder",
    "GATConv",
    "GATv2Conv",
    "GPSEncoder",
    "GPSLayer",
    "GraphAttentionEncoder",
    "PropagationEncoder",
    "RecurrentEncoder",
    "ShortestPathBias",
]
