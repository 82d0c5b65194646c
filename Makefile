# batchlab: the two commands a newcomer needs are `make start` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.batchlab-installed
BOOK_STAMP := $(VENV)/.batchlab-book-installed
# configurable-http-proxy for the JupyterHub test, pinned in .node/package-lock.json (needs Node >= 20).
CHP    := .node/node_modules/.bin/configurable-http-proxy

# make test runs on JOBS pytest-xdist workers; loadscope keeps a test module (a notebook) on one worker,
# handed out in the order tests/conftest.py sorts them (heaviest first; xdist would sort by test count).
JOBS   ?= 2
PYTEST := $(PY) -m pytest -n $(JOBS) --dist loadscope --no-loadscope-reorder
# The edit loop: unit tests only (no server, notebook, browser or slow test).
FAST   := not server and not slow and not browser and not notebook

.PHONY: start test test-fast lint book venv node handout labs check-labs execute bench bench-record clean help

help:
	@echo "make start   JupyterLab + the embedded Triton server (Ctrl-C stops both)"
	@echo "make test    the whole suite: unit, real-server, every notebook under nbval"
	@echo "make test-fast  ruff, then unit tests only (no server, notebook, browser or slow test): the edit loop"
	@echo "make lint    ruff check on src, tests, benchmarks and book"
	@echo "make handout the learner release: labs/ from solutions/ (TODO stubs, nbgrader metadata)"
	@echo "make check-labs  fail if labs/ or the solutions' nbgrader metadata is stale"
	@echo "make execute NB=notebooks/02_dynamic_batching.ipynb   re-execute a notebook in place"
	@echo "make book    the course as a static site in build/book/ (stored outputs, offline; open build/book/index.html)"
	@echo "make bench   the course's benchmarks (each prints one JSON object)"
	@echo "make bench-record  run them on a quiet machine and store the JSON in benchmarks/results/"

# Create or update the virtual environment whenever pyproject.toml changes.
$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade "pip>=23"
	$(PY) -m pip install --quiet -e ".[test]"
	@touch $(STAMP)

venv: $(STAMP)

start: $(STAMP)
	$(PY) -m batchlab.start

# The book's toolchain (the `book` extra) is not part of `make start`; `make test` installs it so
# CI builds the book (tests/test_book.py).
$(BOOK_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[test,book]"
	@touch $(BOOK_STAMP)

# Byte-compiled once here: with PYTHONDONTWRITEBYTECODE set (as on the reference machine) every
# kernel, backend stub and grading run would compile the library again.
test: $(STAMP) $(BOOK_STAMP) node lint
	$(PY) -m compileall -q src
	$(PYTEST) $(PYTEST_ARGS)

# Python the linter reads ([tool.ruff] in pyproject.toml).
LINT   := src tests benchmarks book

lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT)

test-fast: $(STAMP) lint
	$(PYTEST) tests -m "$(FAST)" $(PYTEST_ARGS)

book: $(BOOK_STAMP)
	$(PY) book/build.py build/book

handout: $(STAMP)
	$(PY) -m batchlab.tools.labgen solutions labs --annotate

labs: handout

# Without npm the JupyterHub test is skipped (it says why); everything else still runs.
node:
	@test -x $(CHP) && test $(CHP) -nt .node/package-lock.json || \
	  { command -v npm >/dev/null && npm ci --prefix .node --no-audit --no-fund --silent && touch $(CHP); } || \
	  echo "warning: npm not found or failed: tests/test_jupyterhub.py will be skipped"

check-labs: $(STAMP)
	$(PY) -m batchlab.tools.labgen solutions labs --check

execute: $(STAMP)
	$(PY) -m batchlab.tools.nbtools execute $(NB)

bench: $(STAMP)
	$(PY) -m batchlab.bench dynamic
	$(PY) -m batchlab.bench continuous
	$(PY) -m batchlab.bench fidelity

# Stored reference results (the chapters read dynamic.json): run on a quiet machine.
bench-record: $(STAMP)
	@for b in dynamic continuous fidelity client; do \
	  $(PY) -m batchlab.bench $$b > benchmarks/results/$$b.json.tmp && mv benchmarks/results/$$b.json.tmp benchmarks/results/$$b.json || { rm -f benchmarks/results/$$b.json.tmp; exit 1; }; \
	done

clean:
	rm -rf $(VENV) build .pytest_cache .node/node_modules
