# The two commands of the README. Both do all set-up on a fresh machine (a venv in .venv; as root on Debian also
# chromium for the browser test and envsubst for the template test). `make quickstart` runs the main job; `make test`
# runs the checks (ruff, format, mypy) and every test. Under CI=true a missing tool or a skipped test fails the run.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.raynb-setup
PYTEST_ARGS ?=

.PHONY: setup quickstart test lint bench clean k8s-stack

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	@$(VENV)/bin/pip install -q --upgrade pip
	@echo "installing raynb and its dependencies into $(VENV) (log: $(VENV)/pip.log)"
	@$(VENV)/bin/pip install -q -e '.[dev]' --config-settings editable_mode=compat >$(VENV)/pip.log 2>&1 || { cat $(VENV)/pip.log; exit 1; }
	@bash tests/install-system-tools.sh
	@touch $(STAMP)

setup: $(STAMP)

quickstart: setup
	$(VENV)/bin/python -m raynb.notebook run notebooks/quickstart.ipynb -o out/quickstart.ipynb

# The Kubernetes tests need a control plane built from Go modules, the storage tests an S3 server (SeaweedFS) built
# the same way (minutes cold on 2 cores, seconds warm; cached in ~/.cache/raynb-k8s). Built here, before pytest, so
# no test's time limit covers it. Without Go they skip.
k8s-stack: setup
	@if command -v go >/dev/null; then bash tests/k8s/controlplane.sh build && bash tests/s3/build.sh; \
	elif [ "$$CI" = true ]; then echo "Go is not installed: CI needs it for the Kubernetes tests"; exit 1; \
	else echo "Go is not installed: the Kubernetes tests (tests/k8s) will be skipped"; fi

lint: setup
	$(VENV)/bin/ruff check raynb tests bench
	$(VENV)/bin/ruff format --check raynb tests bench
	$(VENV)/bin/mypy

test: setup lint k8s-stack
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python bench/metrics_path.py
	$(VENV)/bin/python bench/train_overhead.py

clean:
	rm -rf $(VENV) out test-artifacts
