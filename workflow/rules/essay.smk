# E6, the companion essay's claims as measured verdicts (in-context learning as implicit Bayes and implicit GD).
# Float64 hand-built attention (no training) + small causal transformers trained on in-context linear
# regression; the verdict table results/tables/essay_claims.csv (claim, essay_prediction, measured, ci_low,
# ci_high, verdict, scale) is read by the replication report. Logic: src/algo_emu/essay/; docs/essay.md.
# Torch-free imports only: parsing the workflow must not import torch (the essay section's cross-field
# checks, `check` in algo_emu.specs.essay, run with every other section's from algo_emu.config.check_config).
# Each rule runs `python -m algo_emu essay <step> JOB` (algo_emu.cli). Its `job` param is built from the wildcards
# alone (a plain value where a rule has none), its paths spelled out: Snakemake leaves a params function that takes
# `input` or `output` out of the rerun trigger (a "derived" param), and the job holds the config keys the step
# reads, the seeds and the device.
from algo_emu.essay.plan import essay_seeds, variant_init, variant_names

ESSAY = config["essay"]
ESSAY_SEEDS = essay_seeds(config)
ESSAY_VARIANTS = variant_names(ESSAY)
ESSAY_RAW = expand("results/essay/eval/seed{s}.pt", s=ESSAY_SEEDS)
ESSAY_SUMMARIES = expand("results/essay/eval/seed{s}/metrics.json", s=ESSAY_SEEDS)
ESSAY_TRAIN_METRICS = expand("results/essay/models/{v}/seed{s}.json", v=ESSAY_VARIANTS, s=ESSAY_SEEDS)


wildcard_constraints:
    evariant="|".join(ESSAY_VARIANTS),


def _essay_init(wc):
    base = variant_init(wc.evariant)
    return [f"results/essay/models/{base}/seed{wc.seed}.pt"] if base else []


rule essay_equivalences:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    output:
        csv="results/tables/essay_equivalences.csv",
        md="results/tables/essay_equivalences.md",
        tex="results/tables/essay_equivalences.tex",
    params:
        job=step_job(params=step_cfg("essay", "equivalences"), seeds=ESSAY_SEEDS,
                     out_csv="results/tables/essay_equivalences.csv"),
    threads: 1
    log:
        "logs/essay/equivalences.log",
    shell:
        "{PY} -m algo_emu essay equivalences {params.job} --threads {threads} > {log} 2>&1"


rule essay_train:
    input:
        init=_essay_init,
    output:
        model="results/essay/models/{evariant}/seed{seed}.pt",
        metrics="results/essay/models/{evariant}/seed{seed}.json",
    params:
        job=lambda wc: step_job(
            params=step_cfg("essay", "train", wc.evariant), variant=wc.evariant, seed=int(wc.seed), device_spec=DEVICE,
            init=next(iter(_essay_init(wc)), None), out_model=f"results/essay/models/{wc.evariant}/seed{wc.seed}.pt",
            out_metrics=f"results/essay/models/{wc.evariant}/seed{wc.seed}.json"),
    threads: 1
    resources:
        mem_mb=2000,
        runtime=120,
    log:
        "logs/essay/train_{evariant}_seed{seed}.log",
    benchmark:
        "results/benchmarks/essay_train_{evariant}_seed{seed}.tsv"
    shell:
        "{PY} -m algo_emu essay train {params.job} --threads {threads} > {log} 2>&1"


rule essay_evaluate:
    input:
        models=expand("results/essay/models/{v}/seed{{seed}}.pt", v=ESSAY_VARIANTS),
    output:
        raw="results/essay/eval/seed{seed}.pt",
        metrics="results/essay/eval/seed{seed}/metrics.json",
    params:
        job=lambda wc: step_job(
            params=step_cfg("essay", "evaluate"), seed=int(wc.seed), device_spec=DEVICE,
            models=[f"{v}=results/essay/models/{v}/seed{wc.seed}.pt" for v in ESSAY_VARIANTS],
            out_raw=f"results/essay/eval/seed{wc.seed}.pt", out_metrics=f"results/essay/eval/seed{wc.seed}/metrics.json"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    log:
        "logs/essay/evaluate_seed{seed}.log",
    benchmark:
        "results/benchmarks/essay_evaluate_seed{seed}.tsv"
    shell:
        "{PY} -m algo_emu essay evaluate {params.job} --threads {threads} > {log} 2>&1"


rule essay_aggregate:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        raw=ESSAY_RAW,
        summaries=ESSAY_SUMMARIES,
        train=ESSAY_TRAIN_METRICS,
        equivalences="results/tables/essay_equivalences.csv",
    output:
        claims=report("results/tables/essay_claims.csv", caption="../report/essay.rst", category="E6 essay",
                      subcategory="tables", labels={"name": "essay_claims.csv"}),
        md="results/tables/essay_claims.md",
        tex="results/tables/essay_claims.tex",
        curves="results/tables/essay_curves.csv",
        details="results/essay/claims_details.json",
    params:
        job=step_job(
            params=step_cfg("essay", "claims"), raw=ESSAY_RAW, summaries=ESSAY_SUMMARIES, train_metrics=ESSAY_TRAIN_METRICS,
            equivalences="results/tables/essay_equivalences.csv", out_claims="results/tables/essay_claims.csv",
            out_curves="results/tables/essay_curves.csv", out_details="results/essay/claims_details.json"),
    threads: 1
    log:
        "logs/essay/aggregate.log",
    shell:
        "{PY} -m algo_emu essay claims {params.job} --threads {threads} > {log} 2>&1"


rule essay_icl_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        curves="results/tables/essay_curves.csv",
    output:
        pdf="results/figures/essay_icl.pdf",
        png=report("results/figures/essay_icl.png", caption="../report/essay.rst", category="E6 essay",
                   subcategory="figures", labels={"name": "essay_icl.png"}),
    params:
        job=step_job(params=step_cfg("essay", "figure", "icl"), kind="icl", curves="results/tables/essay_curves.csv",
                     out="results/figures/essay_icl"),
    threads: 1
    log:
        "logs/essay/figure_icl.log",
    shell:
        "{PY} -m algo_emu essay figure {params.job} --threads {threads} > {log} 2>&1"


rule essay_equivalences_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/essay_equivalences.csv",
    output:
        pdf="results/figures/essay_equivalences.pdf",
        png=report("results/figures/essay_equivalences.png", caption="../report/essay.rst", category="E6 essay",
                   subcategory="figures", labels={"name": "essay_equivalences.png"}),
    params:
        job=step_job(params=step_cfg("essay", "figure", "equivalences"), kind="equivalences",
                     equivalences="results/tables/essay_equivalences.csv", out="results/figures/essay_equivalences"),
    threads: 1
    log:
        "logs/essay/figure_equivalences.log",
    shell:
        "{PY} -m algo_emu essay figure {params.job} --threads {threads} > {log} 2>&1"

