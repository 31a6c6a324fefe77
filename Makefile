# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone:
# they create .venv, install the package with pinned dependencies, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.installed
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: venv demo test test-slow docs bench bench-core bench-scan clean

venv: $(STAMP)

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -c constraints.txt -e '.[test,docs,examples,tf-agents]'
	# The TF-Agents guide's code runs in the tests. TF-Agents 0.19 declares pins
	# that conflict with TF 2.21; its real needs come with the extra above.
	$(PIP) install --quiet --no-deps -c constraints.txt tf-agents==0.19.0
	touch $(STAMP)

demo: venv
	$(PY) examples/vtrace_targets.py

test: venv
	$(PY) -m pytest -q -n 2 tests

test-slow: venv
	$(PY) -m pytest -q -m slow --run-slow tests

docs: venv
	$(PY) -m mkdocs build --strict --site-dir site

bench-core: venv
	$(PY) benchmarks/bench_core.py

bench-scan: venv
	$(PY) benchmarks/scan_crossover.py

bench: venv
	bash benchmarks/run_all.sh

clean:
	rm -rf $(VENV) $(VENV)-* site build *.egg-info
