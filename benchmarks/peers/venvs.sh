# Sourced by run_all.sh (`make bench`) and bench_agent.sh (`make bench-agent`):
# the peer venvs, built once each from their pinned requirements files.
# Needs PYTHON (the interpreter that creates them) and MAIN_PY (.venv's).

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
