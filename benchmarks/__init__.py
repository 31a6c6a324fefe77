"""Benchmarks of tf_vtrace (see benchmarks/README.md).

A package so that every script runs the same way, from the checkout root:
``python -m benchmarks.bench_core``. ``-m`` puts the current directory first on
``sys.path``, so ``from benchmarks import harness`` resolves and this
checkout's ``tf_vtrace`` wins over any installed one (a git worktree shares
its venv with the main checkout); no script edits ``sys.path`` itself.
"""
