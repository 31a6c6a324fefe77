# Set-up and everyday commands. `make demo` and `make test` work on a fresh clone:
# they create .venv, install the package with pinned dependencies, then run.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Two install stamps: `make demo` installs only the package and the demo's
# extra; `make test` adds the test, docs and TF-Agents extras on top.
DEMO_STAMP := $(VENV)/.installed-demo
STAMP := $(VENV)/.installed
RAY_STAMP := $(VENV)/.installed-ray
ENVPOOL_STAMP := $(VENV)/.installed-envpool
export TF_CPP_MIN_LOG_LEVEL ?= 2

.PHONY: venv venv-demo venv-ray venv-envpool demo demo-ray demo-eval learn-full ablation lag-benchmark lag-benchmark-full lag-benchmark-space-invaders minatar-benchmark continuous-benchmark minatar-lag-benchmark stateless-benchmark bench-recurrent lint test test-slow docs docs-data bench bench-agent bench-core bench-scan bench-actors clean

venv: $(STAMP)
venv-demo: $(DEMO_STAMP)
venv-ray: $(RAY_STAMP)
venv-envpool: $(ENVPOOL_STAMP)

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(DEMO_STAMP): setup.py constraints.txt | $(VENV)/bin/python
	$(PIP) install --quiet -c constraints.txt -e '.[agent]'
	touch $(DEMO_STAMP)

$(RAY_STAMP): setup.py constraints.txt | $(VENV)/bin/python
	$(PIP) install --quiet -c constraints.txt -e '.[agent,ray]'
	touch $(RAY_STAMP)

$(ENVPOOL_STAMP): setup.py constraints.txt | $(VENV)/bin/python
	$(PIP) install --quiet -c constraints.txt -e '.[agent,envpool]'
	touch $(ENVPOOL_STAMP)

$(STAMP): setup.py constraints.txt | $(VENV)/bin/python
	$(PIP) install --quiet -c constraints.txt -e '.[agent,atari,minatar,mujoco,envpool,test,docs,examples,tf-agents,ray]'
	# The TF-Agents guide's code runs in the tests. TF-Agents 0.19 declares pins
	# that conflict with TF 2.21; its real needs come with the extra above.
	$(PIP) install --quiet --no-deps -c constraints.txt tf-agents==0.19.0
	touch $(STAMP)

# On a machine without a GPU, TensorFlow logs a CUDA "failed call to cuInit"
# error at start-up; level 3 keeps TensorFlow's C++ errors out of the demo.
# The IMPALA agent learns CartPole-v1 (docs/tutorials/agent.md): progress bar, then
# runs/demo/{learning_curve.png,tensorboard,checkpoints,policy}; the
# SavedModel is then evaluated over 20 episodes in a fresh process.
# The actor acts in a thread of this process while the learner learns (the
# asynchronous default); `make demo BACKEND=local` runs the synchronous loop,
# `make demo BACKEND=process NUM_ACTORS=2` or `make demo-ray` run the actors
# in worker processes or as Ray actors (docs/howto/actors.md). The envs are
# gymnasium's NumPy-vectorized CartPole (VECTOR_ENV=auto); `make demo
# VECTOR_ENV=gymnasium` steps one Python env per copy (SyncVectorEnv),
# `make demo VECTOR_ENV=envpool` EnvPool's C++ CartPole (the envpool extra).
DEMO_OUT ?= runs/demo
BACKEND ?= thread
NUM_ACTORS ?= 1
VECTOR_ENV ?= auto
# Greedy evaluation every 25k env steps, the best policy kept (policy_best/).
EVAL_EVERY ?= 25000
demo: venv-demo $(if $(filter ray,$(BACKEND)),venv-ray) $(if $(filter envpool,$(VECTOR_ENV)),venv-envpool)
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_vtrace.agent train --env CartPole-v1 --out $(DEMO_OUT) \
		--backend $(BACKEND) --num-actors $(NUM_ACTORS) --vector-env $(VECTOR_ENV) \
		--eval-every $(EVAL_EVERY) --restart
	$(MAKE) --no-print-directory demo-eval

demo-ray:
	$(MAKE) --no-print-directory demo BACKEND=ray NUM_ACTORS=2 DEMO_OUT=runs/demo-ray

# The final policy, then the best one of the evaluations during training,
# each on 20 new episodes.
demo-eval: venv-demo
	TF_CPP_MIN_LOG_LEVEL=3 $(PY) -m tf_vtrace.agent evaluate $(DEMO_OUT)/policy \
		$$(ls -d $(DEMO_OUT)/policy_best 2>/dev/null) --episodes 20

# Thirty seeds of the demo run, two at a time, with evaluation
# (benchmarks/results/agent_seeds.{json,png}: docs/tutorials/agent.md's result; about 13 minutes).
learn-full: venv
	$(PY) -m benchmarks.learning.agent_learning seeds --jobs 2 --eval-every $(EVAL_EVERY) \
		--seeds 0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29

# V-trace vs no correction at policy lags 0, 8, 32 (benchmarks/results/agent_ablation.png).
ablation: venv
	$(PY) -m benchmarks.learning.agent_learning ablation --seeds 0 1 2 --lags 0 8 32

# Every correction × policy lag × seed (docs/explanation/corrections.md): the quick
# smoke version into runs/lag-benchmark-quick, the full one into benchmarks/results/.
lag-benchmark: venv
	$(PY) -m benchmarks.learning.lag_benchmark quick --out runs/lag-benchmark-quick

lag-benchmark-full: venv
	$(PY) -m benchmarks.learning.lag_benchmark full --jobs 2

# The third env, MinAtar SpaceInvaders, on its own (into benchmarks/results/).
lag-benchmark-space-invaders: venv
	$(PY) -m benchmarks.learning.lag_benchmark space-invaders --jobs 2

# The learning benchmarks (benchmarks/learning/runner.py, plans.py): every run
# is the agent's own `train` in benchmarks/results/<plan>/runs/, resumable (run
# the target again after an interruption: finished runs are skipped, the others
# resume from their checkpoints), JOBS at once; the report goes to
# benchmarks/results/<plan>/, `make docs-data` puts it into the docs.
JOBS ?= 2
# Five MinAtar games × 3 seeds × 5M env steps (docs/explanation/minatar.md).
minatar-benchmark: venv
	$(PY) -m benchmarks.learning.runner minatar --jobs $(JOBS)

# Pendulum, LunarLanderContinuous, HalfCheetah, Hopper × 3 seeds, plus V-trace
# against no correction at the natural lag and at lag 16 on HalfCheetah.
continuous-benchmark: venv
	$(PY) -m benchmarks.learning.runner continuous --jobs $(JOBS)

# MinAtar Breakout and SpaceInvaders: V-trace against no correction at policy
# lags 0, 16, 64, 3 seeds × 1M env steps.
minatar-lag-benchmark: venv
	$(PY) -m benchmarks.learning.runner minatar-lag --jobs $(JOBS)

# The linter (ruff.toml) first: a lint error fails `make test` and so CI.
# LSTM against MLP on tf_vtrace/StatelessCartPole-v0 with --preset
# stateless-cartpole, 3 seeds × 1M env steps, a greedy evaluation every 50k
# steps keeping the best policy (issue 22; ~30 min on 2 loaded cores).
stateless-benchmark: venv
	$(PY) -m benchmarks.learning.stateless_cartpole --seeds 0 1 2 --steps 1000000 \
		--eval-every 50000

# The recurrent learner step against the feed-forward one (the demo's 16 envs × 20
# steps; the script's --num-envs 32 gives the earlier size).
bench-recurrent: venv
	$(PY) -m benchmarks.experiments.recurrent_learner_step

lint: venv
	$(VENV)/bin/ruff check .

test: venv lint
	$(PY) -m pytest -q -n 2 tests

test-slow: venv
	$(PY) -m pytest -q -m slow --run-slow tests

docs: venv
	$(PY) -m mkdocs build --strict --site-dir site

bench-core: venv
	$(PY) -m benchmarks.bench_core

bench-scan: venv
	$(PY) -m benchmarks.scan_crossover

# Env steps/s, learner steps/s and policy lag per actor backend (docs/howto/actors.md).
bench-actors: venv
	mkdir -p benchmarks/results
	$(PY) -m benchmarks.actor_backends --out benchmarks/results/actor_backends.json

bench: venv
	bash benchmarks/peers/run_all.sh

# Our agent against RLlib IMPALA on CartPole-v1, 3 seeds alternating
# (docs/performance.md); builds .venv-bench-rllib on first use.
bench-agent: venv
	bash benchmarks/peers/bench_agent.sh

# The benchmarks write into benchmarks/results/; this copies what the docs
# show from there: figures into docs/img/, reports into docs/records/ (their
# links rewritten for that folder), their data into docs/records/data/. A
# result not produced yet is skipped.
RESULTS = benchmarks/results
docs-data:
	@set -e; for name in lag_benchmark lag_benchmark_space_invaders bench_agent/bench_agent; do \
	  base=$$(basename $$name); [ -f $(RESULTS)/$$name.md ] || continue; \
	  sed -e "s|]($$base.png)|](../img/$$base.png)|" -e "s|](performance.md|](../performance.md|" \
	    $(RESULTS)/$$name.md > docs/records/$$base.md; \
	  cp $(RESULTS)/$$name.json docs/records/data/; cp $(RESULTS)/$$name.png docs/img/; \
	  echo "docs-data: $$base"; done
	@for f in keras_agent.png performance_scaling.png; do \
	  [ ! -f $(RESULTS)/$$f ] || { cp $(RESULTS)/$$f docs/img/ && echo "docs-data: $$f"; }; done
	@[ ! -f $(RESULTS)/agent_seeds.png ] || { cp $(RESULTS)/agent_seeds.png docs/img/agent_seeds.png \
	  && cp $(RESULTS)/agent_seeds.json docs/records/data/agent_seeds_latest.json && echo "docs-data: agent_seeds"; }
	@for f in keras_agent.json actor_backends.json; do \
	  [ ! -f $(RESULTS)/$$f ] || { cp $(RESULTS)/$$f docs/records/data/ && echo "docs-data: $$f"; }; done
	@# The learning benchmarks: figure and data copied, their tables filled into
	@# the pages' <!-- benchmark: NAME --> blocks.
	@for name in minatar continuous minatar-lag; do \
	  stem=$$(echo $$name | tr - _)_benchmark; [ -f $(RESULTS)/$$name/$$stem.json ] || continue; \
	  cp $(RESULTS)/$$name/$$stem.png docs/img/; cp $(RESULTS)/$$name/$$stem.json docs/records/data/; done
	@$(PY) -m benchmarks.learning.report fill docs/explanation/minatar.md \
	  --results $(RESULTS) --images docs/img

clean:
	rm -rf $(VENV) $(VENV)-* site build *.egg-info
