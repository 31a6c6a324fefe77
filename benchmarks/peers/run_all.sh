#!/usr/bin/env bash
# `make bench`: tf_vtrace against trfl, rlax, a PyTorch loop and a NumPy loop, in one run.
# Creates the peer venvs on first use (pinned in benchmarks/peers/requirements-*.txt),
# then runs benchmarks/peers/run_peers.py (every implementation in its own process)
# and draws docs/performance_scaling.png.
set -euo pipefail
cd "$(dirname "$0")/../.."
export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
PYTHON="${PYTHON:-python3}"
MAIN_PY=.venv/bin/python

if [ ! -x "$MAIN_PY" ]; then
  echo "run 'make venv' first: $MAIN_PY is missing" >&2
  exit 1
fi

# make_venv DIR REQUIREMENTS [--no-deps]: create DIR once; the stamp records
# which requirements file it was built from, so editing the pins rebuilds it.
make_venv() {
  local dir=$1 requirements=$2 stamp=$1/.bench-installed
  shift 2
  if [ -f "$stamp" ] && cmp -s "$stamp" "$requirements"; then
    return
  fi
  echo "creating $dir from $requirements ..." >&2
  "$PYTHON" -m venv "$dir"
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "$@" -r "$requirements"
  cp "$requirements" "$stamp"
}

# trfl runs on the main venv's TensorFlow: .venv-bench-tf sees .venv's
# site-packages through a .pth file and adds only trfl (its other deps -
# absl, dm-tree, six, wrapt - already come with tensorflow-probability).
make_tf_venv() {
  local dir=.venv-bench-tf
  if [ ! -f "$dir/.bench-installed" ] || ! cmp -s "$dir/.bench-installed" benchmarks/peers/requirements-tf.txt; then
    "$PYTHON" -m venv "$dir"
    local main_site peer_site
    main_site=$("$MAIN_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    peer_site=$("$dir/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$main_site" > "$peer_site/main_venv.pth"
  fi
  make_venv "$dir" benchmarks/peers/requirements-tf.txt --no-deps
}

make_tf_venv
make_venv .venv-bench-jax benchmarks/peers/requirements-jax.txt
make_venv .venv-bench-torch benchmarks/peers/requirements-torch.txt

mkdir -p benchmarks/results
"$MAIN_PY" -m benchmarks.peers.run_peers "$@" | tee benchmarks/results/peers.txt
.venv-bench-torch/bin/python -m benchmarks.peers.plot_scaling
