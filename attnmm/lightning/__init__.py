"""The Lightning side of the recipes: task modules, callbacks, checkpointing, the recipe CLI and sampling
(the heads are model parts, in :mod:`attnmm.nn`)."""

from attnmm.lightning.averaging import AverageCheckpoints
from attnmm.lightning.callbacks import AttentionMapLogger, AttentionMapPNG
from attnmm.lightning.checkpoint import AtomicCheckpointIO, RandomState, find_last_checkpoint
from attnmm.lightning.cli import RecipeCLI, write_metrics
from attnmm.lightning.generate import TextSample, generate
from attnmm.lightning.objectives import CTC, MultiClass, MultiLabel, Objective, PerSegment
from attnmm.lightning.schedule import Optimization, warmup_cosine
from attnmm.lightning.sequence_task import SequenceTask
from attnmm.lightning.task import ClassificationTask, EncoderTask, Ensemble
from attnmm.lightning.transfer import Transfer

__all__ = ["CTC", "AtomicCheckpointIO", "AttentionMapLogger", "AttentionMapPNG", "AverageCheckpoints",
           "ClassificationTask", "EncoderTask", "Ensemble", "MultiClass", "MultiLabel", "Objective", "Optimization",
           "PerSegment", "RandomState", "RecipeCLI", "SequenceTask", "TextSample", "Transfer", "find_last_checkpoint",
           "generate", "warmup_cosine", "write_metrics"]
