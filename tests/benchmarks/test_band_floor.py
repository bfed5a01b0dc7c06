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


def _stored(peer: bool) -> dict:
    seconds = {name: 0.005 for name in band_floor.PARTS} | {"attnmm step": 0.046}
    if peer:
        seconds["local-attention step"] = 0.072
    return {"machine": "m", "commit": "abc1234", "threads": 2, "rounds": 7, "T": 64, "W": 192, "blocks": 512,
            "seconds": seconds}


def test_the_floors_and_the_table_come_from_the_store() -> None:
    stored = _stored(peer=True)
    floors = band_floor.floors(stored)
    assert abs(floors["products"] - 0.030) < 1e-12
    macs = 512 * 64 * 192 * band_floor.E
    expected = 6 * band_floor.H * band_floor.L * (2 * band_floor.LEFT + 1) * band_floor.E / (macs / 0.005)
    assert abs(floors["minimal"] - expected) < 1e-12
    table = band_floor.markdown(stored)
    assert "| the six products | 30.0 | |" in table and "| local-attention step | 72.0 | |" in table
    assert "local-attention / 3 = 24.0 ms" in table and "abc1234" in table
    assert "local-attention step" not in band_floor.markdown(_stored(peer=False))
    assert "busy" not in table and "kept the CPUs busy" in band_floor.markdown({**stored, "idle": False})


def test_the_page_section_is_the_stored_run() -> None:
    import json

    page = band_floor.PAGE.read_text()
    stored = json.loads(band_floor.RESULTS.read_text())
    assert band_floor.START in page and band_floor.render_page(page, stored) == page
    once = band_floor.render_page(f"before\n{band_floor.START}\nold\n{band_floor.END}\nafter\n", stored)
    assert "old" not in once and once.endswith("after\n") and band_floor.markdown(stored) in once
