"""Model parts built on the attention core, by the data they serve.

- Graphs (PyG-facing): :class:`AttentionConv` (a drop-in for PyG's ``TransformerConv``),
  :class:`GATConv` and :class:`GATv2Conv` (drop-ins for PyG's layers of the same names), a graph
  attention encoder, predict-then-propagate over a mask, ego-neighbour separation for
  heterophilous graphs, a GPS graph transformer and a shortest-path
  score bias.
- Sequences: the recurrent baseline of the attention encoders (:class:`RecurrentEncoder`).
- Image patch grids: self-attention that computes a convolution, and the CNN baseline (:mod:`attnmm.nn.cnn`).
- Categorical features (atoms, bonds) as summed embeddings per column (:class:`CategoricalEncoder`).
- Heads after the encoder: pooled and per-token classifiers, per-segment pooling of a multimodal
  sequence, the CTC head and the attention decoder of sequence recognition; and deep ensembles
  (:class:`Ensemble`) of whole models.
"""

from attnmm.nn.categorical import CategoricalEncoder
from attnmm.nn.cnn import ConvAsAttention, ConvEncoder
from attnmm.nn.ctc import CTCHead
from attnmm.nn.ego_neighbour import EgoNeighbourEncoder
from attnmm.nn.ensemble import Ensemble
from attnmm.nn.gat_conv import GATConv
from attnmm.nn.gatv2_conv import GATv2Conv
from attnmm.nn.gps import GPSEncoder, GPSLayer
from attnmm.nn.graph_encoder import GraphAttentionEncoder
from attnmm.nn.heads import (
    AttentionDecoder,
    PoolingClassifier,
    SegmentPoolingClassifier,
    TokenClassifier,
    TokenHeads,
)
from attnmm.nn.propagation import PropagationEncoder
from attnmm.nn.recurrent import RecurrentEncoder
from attnmm.nn.spd_bias import ShortestPathBias
from attnmm.nn.transformer_conv import AttentionConv

__all__ = [
    "AttentionConv",
    "AttentionDecoder",
    "CategoricalEncoder",
    "CTCHead",
    "Ensemble",
    "ConvAsAttention",
    "ConvEncoder",
    "EgoNeighbourEncoder",
    "GATConv",
    "GATv2Conv",
    "GPSEncoder",
    "GPSLayer",
    "GraphAttentionEncoder",
    "PoolingClassifier",
    "PropagationEncoder",
    "RecurrentEncoder",
    "SegmentPoolingClassifier",
    "ShortestPathBias",
    "TokenClassifier",
    "TokenHeads",
]
