"""Generated Speech Commands folders of spoken digits, for the tests of the data modules that read them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile


def write_voices(folder: Path, speakers: int = 6, full: bool = False) -> None:
    """Speech Commands clips at 16 kHz: every speaker says two digits and one other word; the 12-class
    layout (digits in ``_unknown_``) or, with ``full``, a folder per word and the official lists."""
    words = ("three", "seven", "marvin")
    for s in range(speakers):
        for w, word in enumerate(words):
            clip = np.full(1600 + 160 * w, 0.1, dtype=np.float32)
            name = f"p{s:03d}_nohash_0.wav"
            path = folder / word / name if full else folder / "_unknown_" / f"{word}_{name}"
            path.parent.mkdir(parents=True, exist_ok=True)
            soundfile.write(path, clip, 16000, subtype="PCM_16")
    if full:
        (folder / "validation_list.txt").write_text("three/p000_nohash_0.wav\n")
        (folder / "testing_list.txt").write_text("")
    else:
        (folder / "yes").mkdir(parents=True, exist_ok=True)
        soundfile.write(folder / "yes" / "p000_nohash_0.wav", np.zeros(160, np.float32), 16000, subtype="PCM_16")
