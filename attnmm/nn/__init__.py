"""PyG-facing layers built on the attention core: AttentionConv (a drop-in for PyG's TransformerConv),
a graph attention encoder, a GPS graph transformer layer and a shortest-path score bias."""

from attnmm.nn.attention_conv import AttentionConv
from attnmm.nn.gps import GPSEncoder, GPSLayer
from attnmm.nn.graph_encoder import GraphAttentionEncoder
from attnmm.nn.spd_bias import ShortestPathBias

__all__ = ["AttentionConv", "GPSEncoder", "GPSLayer", "GraphAttentionEncoder", "ShortestPathBias"]
