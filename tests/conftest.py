"""Shared test configuration: hypothesis profiles, the tests directory on sys.path, and the ``slow`` tier.

``make test-fast`` runs the tests not marked ``slow``. Marked here by where they live: the recipe runs
(``tests/recipes``: subprocesses, DDP, precision, reproducibility), the benchmarks, the studies (all but
the runner's own rules), the examples, the docs' executed pages and tutorials (``test_docs.py``), the
long backend fuzzing (``test_fuzz.py``) and every test on the real datasets (``@pytest.mark.data``);
the kill-and-resume tests, the few tests that train for a while and the checks that start a new
interpreter (the CLI's messages as a person sees them, ``python -m attnmm``, imports without warnings)
carry the marker themselves."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("MPLBACKEND", "Agg")  # figures render off-screen
# The suite spread over processes (pytest-xdist, ``make test``): each takes its share of the cores, it and the
# recipe runs it starts (unless OMP_NUM_THREADS says otherwise). torch's default, a thread per core in every
# process, would put twice as many threads as cores to work on two workers, and the waiting ones burn CPU.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1 and "OMP_NUM_THREADS" not in os.environ:
    import torch

    os.environ["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // _WORKERS))
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

settings.register_profile(
    "default", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("ATTNMM_HYPOTHESIS_PROFILE", "default"))

#: Folders of ``tests/`` whose every test is slow, and single slow files.
SLOW_FOLDERS = ("recipes", "benchmarks", "examples", "studies")
SLOW_FILES = ("test_docs.py", "test_fuzz.py")
#: Files of a slow folder that stay in the quick loop: the study runner's own rules (no training).
FAST_FILES = ("test_runner.py",)
TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path))
        parts = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
        slow = bool(parts) and (parts[0] in SLOW_FOLDERS or parts[-1] in SLOW_FILES) and parts[-1] not in FAST_FILES
        if slow or item.get_closest_marker("data") is not None:
            item.add_marker(pytest.mark.slow)
    # The slow tests first (in their order): with the suite spread over processes (pytest-xdist, ``make
    # test``), the long runs start at once and the many short tests fill in around them, instead of one
    # long run starting last and keeping a single process busy at the end.
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
