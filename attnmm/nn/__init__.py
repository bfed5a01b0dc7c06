"""Model parts built on the attention core: multi-head attention, positional encodings, every encoder,
every head.

A model is ``adapter -> encoder -> head``. Each kind has one place:

- **Encoders** (``encoder(x, mask, tokens=...)`` -> h, the one call every task makes): the transformer
  :class:`~attnmm.nn.Encoder` (pre-norm transformer layers of :class:`~attnmm.nn.MultiHeadAttention`);
  every other encoder lives here, by the data it serves: sequences, the recurrent baseline
  :class:`RecurrentEncoder`; image patch grids, the CNN baseline :class:`ConvEncoder` (and
  :class:`ConvAsAttention`, self-attention that computes a convolution); graphs, the GPS graph
  transformer :class:`GPSEncoder`, a graph attention encoder :class:`GraphAttentionEncoder`,
  predict-then-propagate :class:`PropagationEncoder` and ego-neighbour separation for heterophilous
  graphs :class:`EgoNeighbourEncoder`.
- **Heads** (after the encoder): the classifiers of :mod:`attnmm.nn.heads` (pooled, per token, per
  segment of a multimodal sequence, auxiliary per-token heads), and the heads of sequence recognition,
  the CTC head (:mod:`attnmm.nn.ctc`) and the attention decoder (:mod:`attnmm.nn.decoder`); deep
  ensembles (:class:`Ensemble`) of whole models.
- **Layers for PyG models**: :class:`AttentionConv` (a drop-in for PyG's ``TransformerConv``),
  :class:`GATConv` and :class:`GATv2Conv` (drop-ins for PyG's layers of the same names), the GPS layer
  :class:`GPSConv` (a drop-in for PyG's layer of that name that takes any mask) and a shortest-path
  score bias :class:`ShortestPathBias`; categorical features (atoms, bonds) as summed embeddings per
  column (:class:`CategoricalEncoder`).
"""

from attnmm.common.categorical import CategoricalEncoder
from attnmm.nn.cnn import ConvAsAttention, ConvEncoder
from attnmm.nn.ctc import CTCHead
from attnmm.nn.decoder import AttentionDecoder
from attnmm.nn.ego_neighbour import EgoNeighbourEncoder
from attnmm.nn.encoder import Encoder, EncoderLayer
from attnmm.nn.ensemble import Ensemble
from attnmm.nn.gat_conv import GATConv
from attnmm.nn.gatv2_conv import GATv2Conv
from attnmm.nn.gps import GPSEncoder
from attnmm.nn.gps_conv import GPSConv
from attnmm.nn.graph_encoder import GraphAttentionEncoder
from attnmm.nn.heads import PoolingClassifier, SegmentPoolingClassifier, TokenClassifier, TokenHeads
from attnmm.nn.multihead import MultiHeadAttention
from attnmm.nn.positional import LearnedPE, RotaryPE, Sinusoidal2DPE, SinusoidalPE, sinusoid
from attnmm.nn.propagation import PropagationEncoder
from attnmm.nn.recurrent import RecurrentEncoder
from attnmm.nn.relative import RelativePositionBias
from attnmm.nn.spd_bias import ShortestPathBias
from attnmm.nn.state import IncrementalState
from attnmm.nn.transformer_conv import AttentionConv

__all__ = ["AttentionConv", "Encoder", "EncoderLayer", "IncrementalState", "LearnedPE", "MultiHeadAttention",
           "RelativePositionBias", "RotaryPE", "Sinusoidal2DPE", "SinusoidalPE", "sinusoid", "AttentionDecoder",
           "CategoricalEncoder", "CTCHead", "Ensemble", "ConvAsAttention", "ConvEncoder", "EgoNeighbourEncoder",
           "GATConv", "GATv2Conv", "GPSConv", "GPSEncoder", "GraphAttentionEncoder", "PoolingClassifier",
           "PropagationEncoder", "RecurrentEncoder", "SegmentPoolingClassifier", "ShortestPathBias", "TokenClassifier",
           "TokenHeads"]
