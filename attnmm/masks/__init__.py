"""Masks: definitions of the allowed set A(i), with their dense, sparse and block forms."""

from attnmm.masks._pairs import Pairs
from attnmm.masks._registry import get_mask, list_masks, register_mask
from attnmm.masks.base import IntervalMask, Mask, Structure
from attnmm.masks.causal import Causal
from attnmm.masks.chunk import Chunk
from attnmm.masks.compose import And, Intersection, Not, Or
from attnmm.masks.documents import Documents
from attnmm.masks.full import Full
from attnmm.masks.graph import Graph
from attnmm.masks.grid import Grid
from attnmm.masks.padding import Padding
from attnmm.masks.queries import (
    as_blocks,
    block_sizes,
    first_key,
    grid_size,
    grid_window,
    lookahead_error,
    padding_lengths,
    segmentation,
    without_padding,
)
from attnmm.masks.same_graph import SameGraph
from attnmm.masks.segments import Segments
from attnmm.masks.window import Window

__all__ = ["And", "Causal", "Chunk", "Documents", "Full", "Graph", "Grid", "Intersection", "IntervalMask", "Mask",
           "Not", "Or", "Padding", "Pairs", "SameGraph", "Segments", "Structure", "Window", "as_blocks", "block_sizes",
           "first_key", "get_mask", "grid_size", "grid_window", "list_masks", "lookahead_error", "padding_lengths",
           "register_mask", "segmentation", "without_padding"]
