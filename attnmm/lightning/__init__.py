"""The Lightning task modules, heads, metrics and callbacks shared by the recipes."""

from attnmm.lightning.callbacks import AttentionMapLogger
from attnmm.lightning.checkpoint import AtomicCheckpointIO, RandomState, find_last_checkpoint
from attnmm.lightning.cli import RecipeCLI, write_metrics
from attnmm.lightning.generate import TextSample, generate
from attnmm.lightning.heads import PoolingClassifier, TokenClassifier
from attnmm.lightning.schedule import warmup_cosine
from attnmm.lightning.task import ClassificationTask

__all__ = [
    "AtomicCheckpointIO",
    "AttentionMapLogger",
    "ClassificationTask",
    "PoolingClassifier",
    "RandomState",
    "RecipeCLI",
    "TextSample",
    "TokenClassifier",
    "find_last_checkpoint",
    "generate",
    "warmup_cosine",
    "write_metrics",
]
