# `make install` sets up .venv (the environment only); `make test` does so on first use too and runs ruff,
# the test suite, the doctests and the docs build.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# torch/torchvision/torchaudio versions known to work together (the cap of the build machines)
TORCH_PINS := torch==2.14.1 torchvision==0.29.1 torchaudio==2.11.0

.PHONY: install test test-fast lint typecheck docs serve bench demo clean

$(VENV)/.installed: pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_PINS) -e ".[dev,docs,chem]"
	touch $@

# The environment only: .venv with torch, attnmm (editable) and the dev, docs and chem extras.
install: $(VENV)/.installed

# ruff, the layers of the package as import-linter contracts ([tool.importlinter] in pyproject.toml), and
# the package's types (mypy, [tool.mypy])
lint: $(VENV)/.installed
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports
	$(PY) -m mypy attnmm

typecheck: $(VENV)/.installed
	$(PY) -m mypy attnmm

# The suite runs on TEST_WORKERS processes (pytest-xdist; one per core of a 2-core machine, e.g.
# `make test TEST_WORKERS=8` on a larger one) and names its 20 slowest tests at the end.
TEST_WORKERS ?= 2
PYTEST_ARGS := -n $(TEST_WORKERS) --dist worksteal --durations=20

test: lint docs
	$(PY) -m pytest $(PYTEST_ARGS)

# The quick loop for development (about a minute on two free cores): every test not marked slow, no docs
# build. Slow (tests/conftest.py): recipe runs, DDP, kill-and-resume, benchmarks, examples, executed docs,
# long fuzzing and the real-data tests.
test-fast: $(VENV)/.installed
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# The documentation site (mkdocs.yml): --strict fails on a broken link, a missing page or figure, or an
# unresolved API reference. The build first renders the missing figures (docs/hooks.py).
docs: $(VENV)/.installed
	MPLBACKEND=Agg $(PY) -m mkdocs build --strict

serve: $(VENV)/.installed
	$(PY) -m mkdocs serve

bench: $(VENV)/.installed
	$(PY) -m benchmarks

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache site docs/figures

# The main job: train the speech recipe's default config end to end (data: $ATTNMM_DATA, else
# ../shared/data when present, else ~/.cache/attnmm, downloaded on first use).
demo: $(VENV)/.installed
	ATTNMM_DATA="$${ATTNMM_DATA:-$$(cd ../shared/data 2>/dev/null && pwd)}" $(PY) recipes/speech_truncated.py fit
