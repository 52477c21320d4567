# E1 at convergence (ours, never paper-comparable; docs/experiments.md): not part of `all`.
#   snakemake heads_convergence   each candidate of heads.convergence at E and 2E epochs, every H, the selection seeds
#   snakemake heads_converged     the selected candidate at every H, the top-level seeds, both data protocols
# Training goes through the same `algo_emu heads train` step as the sweeps and the variants, with the candidate's
# epochs, lr and schedule in place of the section's (algo_emu.experiments.heads_settings.candidate_train_params);
# the records say `variant: convergence-<name>-x1|x2` / `converged-<name>` and `paper_comparable: false`.
# Each rule's `job` (`python -m algo_emu heads <step> JOB`) is built from the wildcards alone, as in heads.smk.
from algo_emu.experiments.heads_settings import (
    BUDGETS as _CONV_BUDGETS,
    candidate as _conv_candidate,
    candidate_train_params as _candidate_train_params,
    run_label as _run_label,
    setting_name as _conv_setting_name,
)

HEADS_CONVERGENCE = HEADS["convergence"]
HEADS_CONVERGED = HEADS["converged"]
CONV_SEEDS = list(HEADS_CONVERGENCE["seeds"])
CONV_P = HEADS["p_heads_sweep"]
HEADS_CONVERGENCE_TABLES = expand("results/tables/heads_convergence.{ext}", ext=["csv", "md"])
HEADS_CONVERGED_NAME = HEADS_CONVERGED["protocol"]
HEADS_CONVERGED_GATE = f"results/heads/converged/{HEADS_CONVERGED_NAME}/convergence_check.json"
HEADS_CONVERGED_TABLES = [
    *expand("results/tables/heads_converged.{ext}", ext=["csv", "md"]),
    "results/tables/heads_converged_runs.csv",
    "results/tables/heads_converged_fit.json",
]
HEADS_CONVERGED_FIGURES = expand("results/figures/heads_converged.{ext}", ext=["pdf", "png"])


def heads_convergence_metrics(wildcards=None):
    return [
        f"results/heads/convergence/{c['name']}/{budget}/{_conv_setting_name(H, CONV_P)}/seed{s}/metrics.json"
        for c in HEADS_CONVERGENCE["candidates"]
        for budget in _CONV_BUDGETS
        for H in HEADS["heads_sweep"]
        for s in CONV_SEEDS
    ]


def heads_converged_metrics(wildcards=None):
    return [
        f"results/heads/converged/{HEADS_CONVERGED_NAME}/{protocol}/runs/{_conv_setting_name(H, CONV_P)}/seed{s}/metrics.json"
        for protocol in HEADS_CONVERGED["protocols"]
        for H in HEADS["heads_sweep"]
        for s in SEEDS
    ]


def _conv_runtime(epochs, n_seeds):
    # as heads_train: 30 s per epoch per seed at N = 50,000 on 2 CPU cores, plus start-up (minutes)
    return 10 + (epochs * n_seeds * HEADS["n_prompts"] // 50000 + 1) // 2


rule heads_convergence_train:
    input:
        "data/heads/published/dataset.pt",
    output:
        expand("results/heads/convergence/{{candidate}}/{{budget}}/H{{heads}}_p{{p}}/seed{seed}/metrics.json", seed=CONV_SEEDS),
        model="results/heads/convergence/{candidate}/{budget}/H{heads}_p{p}/model.pt",
    params:
        # the train keys with the candidate's epochs (x E or 2E), lr and schedule: its rerun trigger
        job=lambda wc: step_job(
            params=_candidate_train_params(HEADS, wc.candidate, wc.budget, "published"), protocol="published",
            H=int(wc.heads), p=int(wc.p), seeds=CONV_SEEDS, data_paths=heads_protocol_data("published"),
            out_dir=f"results/heads/convergence/{wc.candidate}/{wc.budget}/H{wc.heads}_p{wc.p}",
            device_spec=DEVICE, variant=_run_label("convergence", wc.candidate, wc.budget),
            checkpoint=f"results/heads/checkpoints/convergence/{wc.candidate}_{wc.budget}_H{wc.heads}_p{wc.p}.pt"),
    log:
        "logs/heads/convergence_{candidate}_{budget}_H{heads}_p{p}.log",
    benchmark:
        "results/benchmarks/heads_convergence_{candidate}_{budget}_H{heads}_p{p}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=1200 + 300 * len(CONV_SEEDS),
        runtime=lambda wc: _conv_runtime(_conv_candidate(HEADS, wc.candidate)["epochs"] * _CONV_BUDGETS[wc.budget],
                                         len(CONV_SEEDS)),
    shell:
        "{PY} -m algo_emu heads train {params.job} --threads {threads} > {log} 2>&1"


rule heads_convergence_table:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        heads_convergence_metrics,
    output:
        HEADS_CONVERGENCE_TABLES,
    params:
        job=lambda wc: step_job(params=step_cfg("heads", "convergence"), metrics=heads_convergence_metrics(),
                                table=HEADS_CONVERGENCE_TABLES[0]),
    log:
        "logs/heads/convergence_table.log",
    shell:
        "{PY} -m algo_emu heads convergence-table {params.job} > {log} 2>&1"


rule heads_convergence:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        HEADS_CONVERGENCE_TABLES,


rule heads_converged_check:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/heads_convergence.csv",
    output:
        HEADS_CONVERGED_GATE,
    params:
        job=lambda wc: step_job(params=step_cfg("heads", "converged"), table="results/tables/heads_convergence.csv",
                                out=HEADS_CONVERGED_GATE),
    log:
        "logs/heads/converged_check.log",
    shell:
        # the refusal (heads.converged.protocol did not converge) is logged and printed where the user sees it
        "{PY} -m algo_emu heads converged-check {params.job} > {log} 2>&1 "
        "|| {{ cat {log} >&2; exit 1; }}"


rule heads_converged_train:
    input:
        data=lambda wc: heads_protocol_data(wc.protocol),
        # checked before any training; ancient: a rewritten check (a new candidate in the table) retrains nothing
        gate=ancient(HEADS_CONVERGED_GATE),
    output:
        expand("results/heads/converged/{{candidate}}/{{protocol}}/runs/H{{heads}}_p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
        model="results/heads/converged/{candidate}/{protocol}/runs/H{heads}_p{p}/model.pt",
    params:
        job=lambda wc: step_job(
            params=_candidate_train_params(HEADS, wc.candidate, "x1", wc.protocol), protocol=wc.protocol,
            H=int(wc.heads), p=int(wc.p), seeds=SEEDS, data_paths=heads_protocol_data(wc.protocol),
            out_dir=f"results/heads/converged/{wc.candidate}/{wc.protocol}/runs/H{wc.heads}_p{wc.p}",
            device_spec=DEVICE, variant=_run_label("converged", wc.candidate),
            checkpoint=f"results/heads/checkpoints/converged/{wc.candidate}_{wc.protocol}_H{wc.heads}_p{wc.p}.pt"),
    log:
        "logs/heads/converged_{candidate}_{protocol}_H{heads}_p{p}.log",
    benchmark:
        "results/benchmarks/heads_converged_{candidate}_{protocol}_H{heads}_p{p}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=1200 + 300 * len(SEEDS),
        runtime=lambda wc: _conv_runtime(_conv_candidate(HEADS, wc.candidate)["epochs"], len(SEEDS)),
    shell:
        "{PY} -m algo_emu heads train {params.job} --threads {threads} > {log} 2>&1"


rule heads_converged_table:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        metrics=heads_converged_metrics,
        gate=HEADS_CONVERGED_GATE,
    output:
        HEADS_CONVERGED_TABLES,
    params:
        job=lambda wc: step_job(
            params=step_cfg("heads", "converged"), metrics=heads_converged_metrics(), seeds=SEEDS,
            gate=HEADS_CONVERGED_GATE, table=HEADS_CONVERGED_TABLES[0], runs_csv=HEADS_CONVERGED_TABLES[2],
            fit_json=HEADS_CONVERGED_TABLES[3]),
    log:
        "logs/heads/converged_table.log",
    shell:
        "{PY} -m algo_emu heads converged-table {params.job} > {log} 2>&1"


rule heads_converged_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/heads_converged.csv",
    output:
        HEADS_CONVERGED_FIGURES,
    params:
        # baseline_tables: our 50-epoch heads table, drawn beside when present (not an input: this target never
        # trains the sweep)
        job=lambda wc: step_job(
            table="results/tables/heads_converged.csv", out=os.path.splitext(HEADS_CONVERGED_FIGURES[0])[0],
            baseline_tables=["results/tables/heads_vs_mse.csv",
                             "results/reference/paper-scale/tables/heads_vs_mse.csv"]),
    log:
        "logs/heads/converged_figure.log",
    shell:
        "{PY} -m algo_emu heads converged-figure {params.job} > {log} 2>&1"


rule heads_converged:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        HEADS_CONVERGED_TABLES,
        HEADS_CONVERGED_FIGURES,


wildcard_constraints:
    candidate=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
    budget=r"x1|x2",
