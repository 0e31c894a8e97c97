# The two commands of the README. Both do all set-up on a fresh machine (a venv in .venv; as root on Debian also
# chromium for the browser test and envsubst for the template test). `make quickstart` runs the main job; `make test`
# runs the checks (ruff, format, mypy) and every test. Under CI=true a missing tool or a skipped test fails the run.
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.raynb-setup
PYTEST_ARGS ?=

.PHONY: setup quickstart test test-fast test-area lint bench clean k8s-stack k8s-stack-start

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
# the same way (minutes cold on 2 cores, seconds warm; cached in ~/.cache/raynb-k8s). `k8s-stack-start` builds them in
# the background at the lowest priority while lint and the other tests run (pytest runs the Kubernetes tests last and
# waits for the build before the first test that needs it, outside that test's time limit); `k8s-stack` builds them
# in the foreground. Without Go they skip (CI fails instead).
STACK_BUILD := $(HOME)/.cache/raynb-k8s/build

k8s-stack: setup
	@if command -v go >/dev/null; then bash tests/s3/build.sh && bash tests/k8s/controlplane.sh build; \
	elif [ "$$CI" = true ]; then echo "Go is not installed: CI needs it for the Kubernetes tests"; exit 1; \
	else echo "Go is not installed: the Kubernetes tests (tests/k8s) will be skipped"; fi

k8s-stack-start: setup
	@mkdir -p $(STACK_BUILD); rm -f $(STACK_BUILD)/rc
	@if command -v go >/dev/null; then \
	  (flock $(STACK_BUILD)/lock nice -n 19 bash -c 'bash tests/s3/build.sh && bash tests/k8s/controlplane.sh build' \
	    >$(STACK_BUILD)/log 2>&1; echo $$? >$(STACK_BUILD)/rc) >/dev/null 2>&1 </dev/null & \
	  echo "building the S3 server and the Kubernetes control plane in the background (log: $(STACK_BUILD)/log)"; \
	elif [ "$$CI" = true ]; then echo "Go is not installed: CI needs it for the Kubernetes tests"; exit 1; \
	else echo 3 >$(STACK_BUILD)/rc; echo "Go is not installed: the Kubernetes tests (tests/k8s) will be skipped"; fi

lint: setup
	$(VENV)/bin/ruff check raynb tests bench
	$(VENV)/bin/ruff format --check raynb tests bench
	$(VENV)/bin/mypy

test: setup k8s-stack-start lint
	RAYNB_STACK_BUILD=$(STACK_BUILD) $(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# The loops for work: lint, types and the unit tests (about a minute); one area of the suite (a few minutes each;
# the areas are in tests/areas.py). `make test` runs all of them, and is what CI runs.
test-fast: lint
	$(VENV)/bin/python -m pytest tests/unit -q $(PYTEST_ARGS)

test-area: setup k8s-stack-start
	@$(VENV)/bin/python -c 'import sys; from tests.areas import AREAS; a = sys.argv[1]; \
	  a in AREAS or sys.exit("make test-area A=<area>: one of " + ", ".join(AREAS) + f" (got {a!r})")' "$(A)"
	RAYNB_STACK_BUILD=$(STACK_BUILD) $(VENV)/bin/python -m pytest -m "area_$(subst -,_,$(A))" $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/python bench/metrics_path.py
	$(VENV)/bin/python bench/train_overhead.py

clean:
	rm -rf $(VENV) out test-artifacts
