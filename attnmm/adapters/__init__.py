"""Adapters: turn a raw batch of one modality into tokens and the mask they attend under."""

from attnmm.adapters._registry import get_adapter, list_adapters, register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.adapters.graph import GraphAdapter, GraphTokens
from attnmm.adapters.image import ImageAdapter
from attnmm.adapters.speech import SpeechAdapter
from attnmm.adapters.speech_stream import SpeechStream
from attnmm.adapters.text import CharFeatures, TextAdapter

__all__ = [
    "Adapter",
    "CharFeatures",
    "GraphAdapter",
    "GraphTokens",
    "ImageAdapter",
    "SpeechAdapter",
    "SpeechStream",
    "TextAdapter",
    "Tokens",
    "get_adapter",
    "list_adapters",
    "register_adapter",
]
