"""Lightning DataModules for the real datasets, and data-root resolution."""

from attnmm.data._audio import AudioBatch, AudioClips, collate_audio, read_audio
from attnmm.data._root import cache_dir, data_dir, resolve_root, writable_copy
from attnmm.data.fsdd import FSDDDataModule
from attnmm.data.graphs import MotifGraphsDataModule, motif_graphs
from attnmm.data.planetoid import PlanetoidDataModule
from attnmm.data.speech_commands import SpeechCommandsDataModule

__all__ = [
    "AudioBatch",
    "AudioClips",
    "FSDDDataModule",
    "MotifGraphsDataModule",
    "PlanetoidDataModule",
    "SpeechCommandsDataModule",
    "cache_dir",
    "collate_audio",
    "data_dir",
    "motif_graphs",
    "read_audio",
    "resolve_root",
    "writable_copy",
]
