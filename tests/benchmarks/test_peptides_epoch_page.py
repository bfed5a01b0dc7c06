"""The graph guide's Peptides-func step tables are the stored run of benchmarks/peptides_epoch.py, rendered."""

from __future__ import annotations

import json

import pytest

from benchmarks import peptides_epoch


def test_the_tables_give_medians_ratios_and_the_profile_by_kind() -> None:
    rounds = {"baseline": [{"wall": w} for w in (0.4, 0.3, 0.5)],
              "candidate": [{"wall": w, "load": 0.004} for w in (0.2, 0.1, 0.2)]}
    kinds = {name: 0.0 for name, _ in peptides_epoch.KINDS}
    kinds["attention kernel (fused SDPA, forward and backward)"] = 0.03
    stored = {"machine": "m", "commit": "abc1234", "baseline": "8c6f76c", "rounds": 3, "batches": 20, "warmup": 3,
              "threads": {"1": rounds}, "profile": {"wall": 0.05, "kinds": kinds, "other operators": 0.01}}
    table = peptides_epoch.markdown(stored)
    assert "| 1 | 0.400 s (rounds 0.300-0.500) | 0.200 s (rounds 0.100-0.200) | 2.00x (rounds 2.00-3.00) |" in table
    assert "| attention kernel (fused SDPA, forward and backward) | 30 | 75% |" in table
    assert "| other operators | 10 | 25% |" in table and "`abc1234`" in table
    assert "Loading a batch between steps: 4.0 ms (1 thread(s))." in table


@pytest.mark.parametrize(("name", "expected"), [
    ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention kernel"),
    ("aten::addmm", "matrix products"), ("aten::scatter_add_", "gathers and scatters"),
    ("aten::copy_", "copies"), ("aten::native_batch_norm_backward", "normalisation"),
    ("aten::threshold_backward", "elementwise"),
])
def test_operators_fall_into_their_kind(name: str, expected: str) -> None:
    kind = next(k for k, test in peptides_epoch.KINDS if test(name))
    assert kind.startswith(expected)


def test_the_page_section_is_the_stored_run() -> None:
    stored = json.loads(peptides_epoch.RESULTS.read_text())
    page = peptides_epoch.PAGE.read_text()
    assert peptides_epoch.START in page and peptides_epoch.render_page(page, stored) == page
