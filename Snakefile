# algo-emu: replication pipeline for "In-Context Algorithm Emulation in
# Fixed-Weight Transformers" (Hu, Liu, Zhang, Liu; ICLR 2026).
# Thin on purpose: the rules live in workflow/rules/, the logic in src/algo_emu/.
import os

from snakemake.exceptions import WorkflowError
from snakemake.utils import min_version

min_version("8.0")


# config/config.yaml (the paper's scale) is the default. A --configfile given on
# the command line REPLACES it instead of being merged over it, so a quick or
# custom config never inherits paper-scale keys it does not mention (missing
# keys take the schema defaults, which are the paper's values).
if not workflow.overwrite_configfiles:

    configfile: "config/config.yaml"


# Each config runs in its own folder (its `workdir`: data/, logs/, results/ and .snakemake/ there), so a small run
# never overwrites the paper-scale results/ nor reuses its data; `--directory` on the command line overrides it.
# The main process resolves it once and hands the absolute path to the jobs it starts (a cluster job or a local
# subprocess parses this file again, already inside that folder or elsewhere: it must not go one level deeper).
if workflow.remote_exec or workflow.subprocess_exec:
    if os.environ.get("ALGO_EMU_WORKDIR"):

        workdir: os.environ["ALGO_EMU_WORKDIR"]

else:

    workdir: config.get("workdir", ".")

    os.environ["ALGO_EMU_WORKDIR"] = os.getcwd()


include: "workflow/rules/common.smk"


# Each experiment's rules, as its spec names them (algo_emu.specs; E1 first).
for _spec in SPECS:
    for _rules in _spec.rule_files:

        include: os.path.join("workflow/rules", _rules)


# Last: the replication report and the manifest take every other output of `all` as input.
include: "workflow/rules/report.smk"


# Small, quick rules run on the submitting machine, not as cluster jobs (each
# SLURM job pays ~10 s of start-up; docs/cluster.md measures the saving), and
# the download needs the network, which compute nodes often lack: each such
# rule says `localrule: True` itself.
rule all:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    default_target: True
    input:
        ALL_OUTPUTS,


# Named targets, one per entry of algo_emu.report.targets.TARGETS (its name and earlier names, the
# aliases): `snakemake <name>` builds that entry's files and what they need. Where a rule of that name
# already writes the files (ames_figure, theorem31_figure, manifest), it is the target itself.
for _target in TARGETS:
    for _name in (_target.name, *_target.aliases):
        if workflow.is_rule(_name):
            _written = set(map(str, workflow.get_rule(_name).output))
            if _written != set(_target.files):
                raise WorkflowError(f"target {_name}: rule {_name} writes {sorted(_written)}, "
                                    f"algo_emu.report.targets says {_target.files}")
            continue

        rule:
            name:
                _name
            input:
                _target.files,
