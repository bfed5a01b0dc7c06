"""benchmarks/calibrate.py: its problems include long rows, its fit recovers the sparse backend's
constants, the row-length term included, from times that follow them (no timing), and FlexAttention's
rows count a block-mask build only where the block mask is rebuilt; a run merges its device's modes into
the constants written, its problems are made in the dtype asked, and options it cannot honour are
refused with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from attnmm.attention.backends import get_backend
from attnmm.attention.backends.flex import flex_available
from attnmm.masks import Window
from benchmarks import calibrate


def _sparse_rows() -> list[tuple[str, tuple[float, ...], float]]:
    sparse, rows = get_backend("sparse"), []
    for label, q, k, v, mask in calibrate.problems():
        leaves = [t.detach().requires_grad_(True) for t in (q, k, v)]
        problem = calibrate._problem(*leaves, mask, "train")
        terms = sparse.cost_terms(*problem)
        if terms[1] <= 4 * calibrate.MAX_SCORES:
            rows.append((label, terms, 0.0))
    return rows


def test_the_problems_have_long_rows() -> None:
    per_row = [terms[3] / terms[1] for _, terms, _ in _sparse_rows() if terms[1]]
    assert max(per_row) >= 1024 and any(label.startswith("documents") for label, _, _ in _sparse_rows())


def test_the_fit_recovers_the_row_length_term() -> None:
    constants = (1e-4, 3e-4, 0.03, 0.02, 2e-4)
    rows = [
        (label, terms, constants[0] + sum(c * x * 1e-6 for c, x in zip(constants[1:], terms)))
        for label, terms, _ in _sparse_rows()
    ]
    fitted, error = calibrate.fit(rows)
    assert error < 1e-3
    assert fitted[4] == pytest.approx(constants[4], rel=1e-2)
    torch.testing.assert_close(torch.tensor(fitted[:2]), torch.tensor(constants[:2]), rtol=0.05, atol=0.0)


@pytest.mark.skipif(flex_available("cpu") is not None, reason=str(flex_available("cpu")))
def test_flex_rows_count_a_build_only_where_the_block_mask_is_rebuilt(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 2, 200, 16, generator=g) for _ in range(3))
    monkeypatch.setattr(calibrate, "problems", lambda *_: [("window", q, k, v, Window(8, 8))])
    rows = calibrate.measure("flex", "infer", 0.0)
    assert [label for label, _, _ in rows] == ["window", "window, block mask rebuilt"]
    (_, cached, t0), (_, rebuilt, t1) = rows
    assert cached[3] == 0.0 and rebuilt[3] == 200 * 200  # the build's positions, only where it happens
    assert cached[:3] == rebuilt[:3] and cached[4] == rebuilt[4] == 0.0  # compiled by the first call
    assert t0 > 0 and t1 > 0


def test_a_run_merges_its_modes_into_the_constants_written() -> None:
    assert calibrate.written() == calibrate._calibration.COSTS  # the file as the module reads it
    before = {"cpu": {"sparse": {"train": (1.0,), "infer": (2.0,)}}}
    after = calibrate.merged(before, "cuda", {"sparse": {"train+half": (3.0,)}})
    assert after == {"cpu": {"sparse": {"train": (1.0,), "infer": (2.0,)}}, "cuda": {"sparse": {"train+half": (3.0,)}}}
    again = calibrate.merged(after, "cpu", {"sparse": {"train": (4.0,)}, "band": {"infer": (5.0,)}})
    assert again["cpu"] == {"sparse": {"train": (4.0,), "infer": (2.0,)}, "band": {"infer": (5.0,)}}
    assert before["cpu"]["sparse"]["train"] == (1.0,)  # the input is left as it was


def test_the_problems_are_made_in_the_dtype_asked_with_the_same_numbers() -> None:
    fp32, bf16 = calibrate.problems()[:3], calibrate.problems(dtype=torch.bfloat16)[:3]
    for (label, *tensors, mask), (label16, *tensors16, mask16) in zip(fp32, bf16, strict=True):
        assert label == label16 and repr(mask) == repr(mask16)
        for a, b in zip(tensors, tensors16, strict=True):
            assert b.dtype == torch.bfloat16 and b.stride() == a.stride()
            torch.testing.assert_close(b, a.to(torch.bfloat16))


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--dtype", "bf16"], "--dtype bf16 is for a GPU"),
        *([(["--device", "cuda"], "torch sees no CUDA device")] if not torch.cuda.is_available() else []),
    ],
)
def test_refused_options_say_why(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        calibrate.main([*argv, "--dry-run"])
    assert says in capsys.readouterr().err


def test_writing_what_is_written_changes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "_calibration.py"
    copy.write_text(calibrate.OUTPUT.read_text())
    monkeypatch.setattr(calibrate, "OUTPUT", copy)
    calibrate.write(calibrate.merged(calibrate.written(), "cuda", {}))
    assert copy.read_text() == calibrate.OUTPUT.read_text() == Path(calibrate._calibration.__file__).read_text()


def test_a_run_stopped_midway_keeps_the_backends_it_fitted(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    copy = tmp_path / "_calibration.py"
    copy.write_text(calibrate.OUTPUT.read_text())
    monkeypatch.setattr(calibrate, "OUTPUT", copy)

    def measure(name: str, how: str, *_: object) -> list[tuple[str, tuple[float, ...], float]]:
        if name == "band":
            raise KeyboardInterrupt  # stopped while timing the second backend
        return [(f"p{i}", (float(i),), 1e-3 * (1 + i)) for i in range(1, 6)]

    monkeypatch.setattr(calibrate, "measure", measure)
    with pytest.raises(KeyboardInterrupt):
        calibrate.main(["--backends", "sparse", "band", "--modes", "infer"])
    costs = calibrate.written()
    assert costs["cpu"]["sparse"]["infer"] == pytest.approx((1e-3, 1e3), rel=1e-3)  # 1 ms + 1 ms a term unit (1e-6)
    assert costs["cpu"]["band"] == calibrate._calibration.COSTS["cpu"]["band"]  # as it was
    assert costs["cpu"]["sparse"]["train"] == calibrate._calibration.COSTS["cpu"]["sparse"]["train"]
