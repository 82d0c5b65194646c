# batchlab: the two commands a newcomer needs are `make start` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.batchlab-installed
# configurable-http-proxy for the JupyterHub test, pinned in .node/package-lock.json (needs Node >= 20).
CHP    := .node/node_modules/.bin/configurable-http-proxy

.PHONY: start test venv node labs check-labs execute bench clean help

help:
	@echo "make start   JupyterLab + the embedded Triton server (Ctrl-C stops both)"
	@echo "make test    the whole suite: unit, real-server, every notebook under nbval"
	@echo "make labs    regenerate labs/ from solutions/"
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

test: $(STAMP) node
	$(PY) -m pytest $(PYTEST_ARGS)

# Without npm the JupyterHub test is skipped (it says why); everything else still runs.
node:
	@test -x $(CHP) && test $(CHP) -nt .node/package-lock.json || \
	  { command -v npm >/dev/null && npm ci --prefix .node --no-audit --no-fund --silent && touch $(CHP); } || \
	  echo "warning: npm not found or failed: tests/test_jupyterhub.py will be skipped"

labs: $(STAMP)
	$(PY) -m batchlab.tools.labgen solutions labs

check-labs: $(STAMP)
	$(PY) -m batchlab.tools.labgen solutions labs --check

execute: $(STAMP)
	$(PY) -m batchlab.tools.nbtools execute $(NB)

bench: $(STAMP)
	$(PY) -m batchlab.bench dynamic
	$(PY) -m batchlab.bench continuous
	$(PY) -m batchlab.bench fidelity

clean:
	rm -rf $(VENV) build .pytest_cache .node/node_modules
