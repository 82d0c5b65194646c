# batchlab: the two commands a newcomer needs are `make start` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.batchlab-installed

.PHONY: start test venv handout labs check-labs execute bench clean help

help:
	@echo "make start   JupyterLab + the embedded Triton server (Ctrl-C stops both)"
	@echo "make test    the whole suite: unit, real-server, every notebook under nbval"
	@echo "make handout the learner release: labs/ from solutions/ (TODO stubs, nbgrader metadata)"
	@echo "make check-labs  fail if labs/ or the solutions' nbgrader metadata is stale"
	@echo "make execute NB=notebooks/02_dynamic_batching.ipynb   re-execute a notebook in place"
	@echo "make bench   the course's benchmarks (each prints one JSON object)"

# Create or update the virtual environment whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

start: $(STAMP)
	$(PY) -m batchlab.start

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

handout: $(STAMP)
	$(PY) -m batchlab.tools.labgen solutions labs --annotate

labs: handout

check-labs: $(STAMP)
	$(PY) -m batchlab.tools.labgen solutions labs --check

execute: $(STAMP)
	$(PY) -m batchlab.tools.nbtools execute $(NB)

bench: $(STAMP)
	$(PY) -m batchlab.bench dynamic
	$(PY) -m batchlab.bench continuous
	$(PY) -m batchlab.bench fidelity

clean:
	rm -rf $(VENV) build .pytest_cache
