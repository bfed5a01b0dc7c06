"""The Lightning task modules, heads, metrics and callbacks shared by the recipes (``CTCHead`` lives in
:mod:`attnmm.nn.ctc` with the CTC decoders and is re-exported here)."""

from attnmm.lightning.callbacks import AttentionMapLogger
from attnmm.lightning.checkpoint import AtomicCheckpointIO, RandomState, find_last_checkpoint
from attnmm.lightning.cli import RecipeCLI, write_metrics
from attnmm.lightning.generate import TextSample, generate
from attnmm.lightning.heads import AttentionDecoder, PoolingClassifier, TokenClassifier
from attnmm.lightning.schedule import warmup_cosine
from attnmm.lightning.sequence_task import SequenceTask
from attnmm.lightning.task import ClassificationTask, EncoderTask
from attnmm.nn.ctc import CTCHead

__all__ = [
    "AtomicCheckpointIO",
    "AttentionDecoder",
    "AttentionMapLogger",
    "CTCHead",
    "ClassificationTask",
    "EncoderTask",
    "PoolingClassifier",
    "RandomState",
    "RecipeCLI",
    "SequenceTask",
    "TextSample",
    "TokenClassifier",
    "find_last_checkpoint",
    "generate",
    "warmup_cosine",
    "write_metrics",
]
