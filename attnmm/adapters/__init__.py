"""Adapters: turn a raw batch of one modality into tokens and the mask they attend under."""

from attnmm.adapters._registry import get_adapter, list_adapters, register_adapter
from attnmm.adapters.base import Adapter, Tokens
from attnmm.adapters.encoded import EncodedAdapter
from attnmm.adapters.graph import GraphAdapter, GraphTokens
from attnmm.adapters.image import ImageAdapter
from attnmm.adapters.multimodal import MultimodalAdapter
from attnmm.adapters.speech import SpeechAdapter
from attnmm.adapters.speech_stream import (
    Emission,
    EmissionLatency,
    SpeechStream,
    StreamingRecognizer,
    emission_latency,
)
from attnmm.adapters.text import CharFeatures, TextAdapter

__all__ = ["Adapter", "CharFeatures", "Emission", "EncodedAdapter", "EmissionLatency", "GraphAdapter", "GraphTokens",
           "ImageAdapter", "MultimodalAdapter", "SpeechAdapter", "SpeechStream", "StreamingRecognizer", "TextAdapter",
           "Tokens", "emission_latency", "get_adapter", "list_adapters", "register_adapter"]
