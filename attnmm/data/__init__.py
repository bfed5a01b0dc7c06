"""Lightning DataModules for the real datasets, and data-root resolution."""

from attnmm.common.vocab import Vocabulary
from attnmm.data._audio import AudioBatch, AudioClips, collate_audio, read_audio
from attnmm.data._root import cache_dir, data_dir, resolve_root, writable_copy
from attnmm.data.augment import AddNoise, BackgroundNoise, ChainAugment, SpeedPerturb, TimeShift
from attnmm.data.avdigits import AVDigitsDataModule
from attnmm.data.cifar import CIFAR10DataModule
from attnmm.data.corruptions import RandomCorruption
from attnmm.data.fsdd import FSDDDataModule
from attnmm.data.fsdd_strings import DigitStringBatch, DigitStrings, FSDDStringsDataModule, collate_digit_strings
from attnmm.data.graphs import GraphDataModule, MotifGraphsDataModule, motif_graphs
from attnmm.data.mnist import MNISTDataModule
from attnmm.data.nodes import NodeDataModule
from attnmm.data.planetoid import PlanetoidDataModule
from attnmm.data.shakespeare import ShakespeareDataModule
from attnmm.data.speech_commands import SpeechCommandsDataModule
from attnmm.data.ud import UPOS_TAGS, UDPOSDataModule, read_conllu

__all__ = ["AVDigitsDataModule", "AddNoise", "AudioBatch", "AudioClips", "BackgroundNoise", "CIFAR10DataModule",
           "ChainAugment", "DigitStringBatch", "DigitStrings", "FSDDDataModule", "FSDDStringsDataModule",
           "GraphDataModule", "MNISTDataModule", "MotifGraphsDataModule", "NodeDataModule", "PlanetoidDataModule",
           "RandomCorruption", "ShakespeareDataModule", "SpeechCommandsDataModule", "SpeedPerturb", "TimeShift",
           "UDPOSDataModule", "UPOS_TAGS", "Vocabulary", "cache_dir", "collate_audio", "collate_digit_strings",
           "data_dir", "motif_graphs", "read_audio", "read_conllu", "resolve_root", "writable_copy"]
