"""benchmarks.band_floor times the band kernel's own products, at the kernel's shapes."""

from __future__ import annotations

from attnmm.attention.backends._blocks import BandGeometry
from benchmarks import band_floor


def test_products_have_the_kernels_shapes() -> None:
    geo = BandGeometry.build(1, 2, 96, 96, 8, 8, 8)
    parts = band_floor.products(geo)
    assert list(parts) == [
        "scores q k^T", "output a v", "d_a = d_out v^T", "d_q = d_s k", "d_k += d_s^T q", "d_v += a^T d_out"
    ]
    G, T, W = geo.B * geo.H * geo.nbp, geo.T, geo.W
    assert parts["scores q k^T"]().shape == (G, T, W)
    assert parts["output a v"]().shape == (G, T, band_floor.E)
    parts["d_k += d_s^T q"]()  # the kernel's own accumulation (BandGeometry.accumulate_keys)
