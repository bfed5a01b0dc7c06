"""recipes/text_pos.py on the real UD English-EWT data."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.data


# its smoke run on the real data: tests/recipes/test_smoke.py::test_fast_dev_run[text_pos], which checks what it
# says of the missing test file too


def test_documented_aux_columns_command_gives_one_head_per_column() -> None:
    # docs/recipes/text_pos.md: more auxiliary targets are a data option; the heads follow by links
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "recipes"))
    import text_pos

    cli = text_pos.main(["--data.aux_columns=[xpos,deprel,feats]", "--data.max_aux_classes=256"], run=False)
    heads = cli.model.objective.aux_heads
    assert list(heads) == ["xpos", "deprel", "feats"]
    assert all(h.linear.in_features == 192 and h.linear.out_features == 256 for h in heads.values())
