# Shared set-up for every experiment's rules: config validation, the Python
# that runs the package, the list of final outputs (from the targets map), wildcard constraints.
import json
import os
import shlex
import sys

from algo_emu.config import check_device, validate_sections  # noqa: E402  (torch-free)
from algo_emu.guard import JOB_ENV, SHELL_PREFIX, recover_workdir  # (standard library only)
from snakemake.logging import logger
from algo_emu.report.targets import TARGETS, all_outputs  # (torch-free)
from algo_emu.specs import step_params  # (torch-free)
from algo_emu.grouping import grouping_on  # (torch-free)
from algo_emu.specs import SPECS  # (standard library only)

# The top level and each experiment's section against its schema (workflow/schemas/), the
# same code as algo_emu.config.load_config: numbers written 1e-3 are numbers, defaults are
# filled in, an error names section.key (e.g. "theorem31.epochs: 0 is less than the minimum
# of 1"), then the cross-field checks. The device is checked before the first job of a local
# run, not here: a cluster's submit host may have no GPU while its jobs do.
validate_sections(config, gpu_check=False)

# Faults (docs/reliability.md): every job's step ends when this Snakemake process or the rule's shell ends
# (algo_emu.guard.die_with_job reads their pids), so a killed run leaves no job writing behind it. The main
# process, before Snakemake checks its lock and incomplete outputs: a lock and incomplete outputs left by a
# killed run are cleared (and logged) when no other run of this workflow is alive in this folder, so the same
# command resumes the run.
os.environ[JOB_ENV] = str(os.getpid())
shell.prefix(SHELL_PREFIX)
if not (workflow.remote_exec or workflow.subprocess_exec):
    recover_workdir(log=logger.warning)


# No long run unwarned: once Snakemake has planned the jobs (its job-count table, which a dry run prints too), the
# planned jobs' predicted cost on this machine and on a GPU, per experiment and in total (algo_emu.cost).
if not (workflow.remote_exec or workflow.subprocess_exec):
    from snakemake_interface_logger_plugins.common import LogEvent as _LogEvent
    from algo_emu.cost import cost_block as _cost_block

    def _announce_cost(record, _said=[]):
        if getattr(record, "event", None) == _LogEvent.RUN_INFO and not _said:
            _said.append(True)
            try:
                jobs = [(job.rule.name, dict(job.wildcards_dict)) for job in workflow.dag.needrun_jobs()]
                for line in _cost_block(jobs, config):
                    sys.stderr.write(line + "\n")
            except Exception as exc:  # a prediction never stops a run
                sys.stderr.write(f"Predicted cost: not available ({type(exc).__name__}: {exc})\n")
        return True

    logger.addFilter(_announce_cost)


onstart:
    if workflow.local_exec:
        check_device(config["device"])  # `device: cuda` without a visible GPU: refused before any job

# The interpreter snakemake runs under has the package installed (make venv).
PY = shlex.quote(sys.executable)
SEEDS = list(config["seeds"])
DEVICE = config["device"]
# Shape groups (algo_emu.grouping): on a GPU, settings of one shape train as one job; on the CPU, one job each.
GROUPED = grouping_on(config)
GROUP_ARGS = {"steps_per_call": config["steps_per_call"], "tf32": config["tf32"]}  # a grouped job's own arguments

# Final outputs: every file of every named target (algo_emu.report.targets, the one map of paper
# figures and tables to targets and files); `rule all` requests them, the report and the manifest read them.
ALL_OUTPUTS = all_outputs()


def step_cfg(section, step, variant=None):
    """The keys of config[section] that `step` reads in `variant` (a wildcard value), as declared in
    algo_emu.specs: the `params` of its job. A rule's params are its rerun trigger, so an edit to
    any other key reruns none of its jobs."""
    return step_params(config[section], section, step, variant)


def step_job(**kwargs):
    """A step's keyword arguments as one shell-quoted JSON object, `python -m algo_emu <experiment> <step> JOB`
    (algo_emu.cli): a rule's `job` param, so a change to any of them reruns the job. Built from the wildcards alone
    (`lambda wc: step_job(...)`, or a plain value): Snakemake does not count a params function that takes input or
    output as a rerun trigger."""
    return shlex.quote(json.dumps(kwargs, sort_keys=True))


wildcard_constraints:
    seed=r"\d+",
    heads=r"\d+",
    p=r"\d+",
