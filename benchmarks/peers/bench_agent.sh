#!/usr/bin/env bash
# `make bench-agent`: our IMPALA agent against RLlib IMPALA on CartPole-v1
# (benchmarks/peers/bench_agent.py). Builds the RLlib venv on first use
# (pinned in benchmarks/peers/requirements-rllib.txt), then runs the seeds
# alternating and writes benchmarks/results/bench_agent/bench_agent.{md,json,png}
# (`make docs-data` copies them into the docs).
set -euo pipefail
cd "$(dirname "$0")/../.."
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PYTHON="${PYTHON:-python3}"
MAIN_PY=.venv/bin/python
# shellcheck source=benchmarks/peers/venvs.sh
source benchmarks/peers/venvs.sh

make_venv .venv-bench-rllib benchmarks/peers/requirements-rllib.txt
"$MAIN_PY" -m benchmarks.peers.bench_agent "$@"
