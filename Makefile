# The two commands of the README. Both do all set-up on a fresh machine (a venv in .venv, Debian's chromium for the
# browser test when this user may install it). `make quickstart` runs the main job; `make test` runs every test.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.raynb-setup
PYTEST_ARGS ?=

.PHONY: setup quickstart test bench clean k8s-stack

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]' --config-settings editable_mode=compat
	@bash tests/browser/install-chromium.sh || echo "chromium not installed: the browser test will be skipped"
	@touch $(STAMP)

setup: $(STAMP)

quickstart: setup
	$(VENV)/bin/python -m raynb.notebook run notebooks/quickstart.ipynb -o out/quickstart.ipynb

# The Kubernetes tests need a control plane built from Go modules (about 10 min cold on 2 cores, seconds warm; cached
# in ~/.cache/raynb-k8s). Built here, before pytest, so no test's time limit covers it. Without Go they skip.
k8s-stack: setup
	@if command -v go >/dev/null; then bash tests/k8s/controlplane.sh build; \
	else echo "Go is not installed: the Kubernetes tests (tests/k8s) will be skipped"; fi

test: setup k8s-stack
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python bench/metrics_path.py
	$(VENV)/bin/python bench/train_overhead.py

clean:
	rm -rf $(VENV) out test-artifacts
