#!/usr/bin/env bash
# `make bench`: tf_vtrace against trfl, rlax, a PyTorch loop and a NumPy loop, in one run.
# Creates the peer venvs on first use (pinned in benchmarks/peers/requirements-*.txt),
# then runs benchmarks/peers/run_peers.py (every implementation in its own process)
# and draws benchmarks/results/performance_scaling.png (`make docs-data` copies it
# into the docs).
set -euo pipefail
cd "$(dirname "$0")/../.."
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PYTHON="${PYTHON:-python3}"
MAIN_PY=.venv/bin/python

if [ ! -x "$MAIN_PY" ]; then
  echo "run 'make venv' first: $MAIN_PY is missing" >&2
  exit 1
fi

# shellcheck source=benchmarks/peers/venvs.sh
source benchmarks/peers/venvs.sh

make_tf_venv
make_venv .venv-bench-jax benchmarks/peers/requirements-jax.txt
make_venv .venv-bench-torch benchmarks/peers/requirements-torch.txt

mkdir -p benchmarks/results
"$MAIN_PY" -m benchmarks.peers.run_peers "$@" | tee benchmarks/results/peers.txt
.venv-bench-torch/bin/python -m benchmarks.peers.plot_scaling
