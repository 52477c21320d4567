# Artifact review: the replication report (paper vs ours, one verdict per number or claim) and the
# run manifest (hashes, commit, config hash, versions, device, timings). Both are outputs of `all`.
# Include this file LAST: its inputs are every other output of `all` (ALL_OUTPUTS, from the targets
# map in algo_emu.report.targets), and the `--report` check below lists what is missing.
# The logic is in src/algo_emu/report/ (replication.py, manifest.py).
import os
import sys

from snakemake.exceptions import WorkflowError

from algo_emu.report.targets import MANIFEST, REPLICATION_OUTPUTS
from algo_emu.report.smoke import smoke_line
from algo_emu.runtime import REPO_ROOT as _REPO_ROOT

# The global description of `snakemake --report` (captions of each output: workflow/report/*.rst).
report: "../report/workflow.rst"


def _config_name():
    """The config file(s) the run used, relative to the repository when inside it (for the scale column)."""
    files = [str(f) for f in workflow.configfiles] or ["config/config.yaml"]
    names = []
    for f in files:
        try:
            names.append(os.path.relpath(os.path.abspath(f), _REPO_ROOT) if os.path.abspath(f).startswith(str(_REPO_ROOT)) else f)
        except ValueError:
            names.append(f)
    return " + ".join(names)


CONFIG_NAME = _config_name()


def replication_inputs(wildcards=None):
    """Every table of `all`."""
    return [f for f in ALL_OUTPUTS if f.startswith("results/tables/") and f.endswith((".csv", ".json"))
            and f not in REPLICATION_OUTPUTS]


def manifest_inputs(wildcards=None):
    return [f for f in dict.fromkeys(ALL_OUTPUTS) if f != MANIFEST]


rule replication:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        replication_inputs,
    output:
        md=report(REPLICATION_OUTPUTS[0], caption="../report/replication.rst", category="0. Replication summary",
                  labels={"what": "report", "name": "replication.md (paper vs ours, verdicts)"}),
        csv=report(REPLICATION_OUTPUTS[1], caption="../report/replication.rst", category="0. Replication summary",
                   labels={"what": "table", "name": "replication.csv"}),
    params:
        job=step_job(config=config, config_name=CONFIG_NAME, out_md=REPLICATION_OUTPUTS[0], out_csv=REPLICATION_OUTPUTS[1],
                     tables_dir=os.path.dirname(REPLICATION_OUTPUTS[1])),  # the tables are its inputs (replication_inputs)
        smoke=smoke_line(config, rst=True) or "",  # the caption's first line at a smoke scale (algo_emu.report.smoke)
    log:
        "logs/report/replication.log",
    shell:
        "{PY} -m algo_emu report replication {params.job} > {log} 2>&1"


rule manifest:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        manifest_inputs,
    output:
        report(MANIFEST, caption="../report/manifest.rst", category="0. Replication summary",
               labels={"what": "manifest", "name": "manifest.json"}),
    params:
        job=step_job(config=config, configfiles=[str(f) for f in workflow.configfiles], outputs=manifest_inputs(),
                     out=MANIFEST, benchmarks="results/benchmarks"),  # every rule's benchmark: records (read if present)
    log:
        "logs/report/manifest.log",
    shell:
        "{PY} -m algo_emu report manifest {params.job} > {log} 2>&1"


# `snakemake --report` on a half-finished results/ tree: name every missing output of `all` and stop,
# instead of Snakemake's first-missing-file error (or a report that silently lacks an experiment).
if any(a == "--report" or a.startswith("--report=") for a in sys.argv):
    _missing = [f for f in dict.fromkeys(ALL_OUTPUTS) if not os.path.exists(f)]
    if _missing:
        raise WorkflowError(
            f"--report: {len(_missing)} output(s) of `all` are missing in {os.getcwd()} (run `snakemake all` with the "
            "same --configfile first); no report written:\n" + "\n".join(f"  - {f}" for f in _missing)
        )
