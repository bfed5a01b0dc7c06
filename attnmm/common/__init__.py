"""Types shared by the layers, the adapters and the data: tokens, vocabularies, categorical and graph
encodings, and the feature kNN graph. They sit above the masks and below every user of them."""

from attnmm.common.categorical import CategoricalEncoder
from attnmm.common.encodings import Encoding, encoding_attr, graph_encoding
from attnmm.common.feature_knn import feature_knn
from attnmm.common.tokens import Tokens
from attnmm.common.vocab import PAD, UNK, Vocabulary

__all__ = [
    "PAD",
    "UNK",
    "CategoricalEncoder",
    "Encoding",
    "Tokens",
    "Vocabulary",
    "encoding_attr",
    "feature_knn",
    "graph_encoding",
]
