"""The robustness page's CUDA table is the committed logs of a GPU check, rendered; the check's options
refuse what they cannot take in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import gpu_check
from benchmarks._page import ROOT


def _stored_run() -> Path:
    marker = next(line for line in gpu_check.PAGE.read_text().splitlines() if "gpu_check --render" in line)
    return ROOT / marker.split("--render ", 1)[1].split("`", 1)[0]


def test_the_page_section_is_the_stored_logs() -> None:
    folder = _stored_run()
    assert folder.is_dir()
    page = gpu_check.PAGE.read_text()
    again = gpu_check.markdown(folder.relative_to(ROOT))
    assert "\n".join(again) in page


def test_the_table_counts_the_checks_and_compares_with_auto(tmp_path: Path) -> None:
    (tmp_path / "cuda_tests.log").write_text("..F.                    [100%]\n")
    (tmp_path / "p1_fp32_0.log").write_text("device: G, torch t\n   sdpa       ok (None, fp32)\n"
                                            "   band       ok (Causal(), fp32)\n   FAILED flex: boom\n")
    (tmp_path / "p2.log").write_text(
        "   | Case A | peer | 2.00 ms | 10 MB |\n   | Case A | attnmm auto | 1.00 ms | 5 MB |\n"
    )
    lines = gpu_check.markdown(tmp_path)
    assert lines[0] == ("CUDA tests: 3 passed, 1 failed. Part 1: 2 checks of a backend against the reference "
                        "(values and gradients), 1 failed.")
    assert "| Case A | peer | 2.00 ms | 10 MB | 2.00 |" in lines
    assert lines[-1].startswith("Median of 10 calls, forward and backward; G, torch t;")


@pytest.mark.parametrize("shard", ["2/2", "x", "1/0"])
def test_a_bad_shard_is_refused_in_one_line(shard: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        gpu_check.main(["--shard", shard])
    assert "--shard takes i/n with 0 <= i < n" in capsys.readouterr().err
