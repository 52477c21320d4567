# Two entry points for a fresh machine (see README):
#   make run    -> the whole pipeline at the paper's scale (snakemake all)
#   make test   -> the test suite (what CI runs)
# Both create .venv from requirements.lock first (once; re-done when the lock changes).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
CORES  ?= all
CONFIG ?= config/config.yaml
TARGET ?= all
# make bench on another machine: BENCH_OUT=tools/benchmarks/paper_scale_<machine> (each CPU its own benchmark)
BENCH_OUT ?= benchmarks/paper_scale
PYTEST_ARGS ?=

.PHONY: run quick test test-slow e2e-slurm bench gpu-wheels campaign lock clean-venv

$(BIN)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

venv: $(BIN)/.installed

# The target goes BEFORE --configfile: --configfile takes several values, so a
# target written after it is read as a second config file (this shipped broken).
run: $(BIN)/.installed
	$(BIN)/snakemake $(TARGET) --profile workflow/profiles/default --cores $(CORES) --configfile $(CONFIG)

# config/quick.yaml's folder is runs/quick/ (its `workdir`): data/, logs/ and results/ of its own.
quick: $(BIN)/.installed
	$(BIN)/snakemake $(TARGET) --profile workflow/profiles/default --cores $(CORES) --configfile config/quick.yaml

test: $(BIN)/.installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-slow: $(BIN)/.installed
	$(BIN)/python -m pytest -m slow $(PYTEST_ARGS)

# A real single-node SLURM cluster (needs root; installs Debian's slurm-wlm if missing), as CI runs it.
e2e-slurm: $(BIN)/.installed
	.ci/slurm/run_e2e.sh
	.ci/slurm/failure_e2e.sh

bench: $(BIN)/.installed
	$(BIN)/python benchmarks/paper_scale.py --out $(BENCH_OUT).json --md $(BENCH_OUT).md --steps 8 --loop-steps 2 --reps 3 $(BENCH_ARGS)

# Snakemake and what it needs, as wheels for a Python 3.12 x86_64 GPU machine without network (tools/gpu_run.sh
# installs them there: docs/gpu.md).
gpu-wheels: $(BIN)/.installed
	$(BIN)/python tools/gpu_wheels.py --dest .whl

# The paper-scale campaign (tools/campaign/, our own machinery, not installed): every paper-scale setting still
# to do, in priority order, at the commit pinned in results/reference/paper-scale/campaign.json, one setting per
# job, resumable across interruptions and machines (commit the set, including campaign/resume/, to carry a
# setting over). Its other steps: python -m tools.campaign --help.
campaign: $(BIN)/.installed
	$(BIN)/python -m tools.campaign run --dir results/reference/paper-scale $(CAMPAIGN_ARGS)

lock: $(BIN)/.installed
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^torch==' > requirements.lock.new

clean-venv:
	rm -rf $(VENV)
