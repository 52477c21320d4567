# E6, the companion essay's claims as measured verdicts (in-context learning as implicit Bayes and implicit GD).
# Float64 hand-built attention (no training) + small causal transformers trained on in-context linear
# regression; the verdict table results/tables/essay_claims.csv (claim, essay_prediction, measured, ci_low,
# ci_high, verdict, scale) is read by the replication report. Logic: src/algo_emu/essay/; docs/essay.md.
# Torch-free imports only: parsing the workflow must not import torch (the essay section's cross-field
# checks run with every other section's in algo_emu.config.check_config, from common.smk).
from algo_emu.essay.plan import essay_seeds, variant_init, variant_names

ESSAY = config["essay"]
ESSAY_SEEDS = essay_seeds(config)
ESSAY_VARIANTS = variant_names(ESSAY)
ESSAY_EQUIV_SEEDS = " ".join(str(s) for s in ESSAY_SEEDS)


wildcard_constraints:
    evariant="|".join(ESSAY_VARIANTS),


def _essay_init(wc):
    base = variant_init(wc.evariant)
    return [f"results/essay/models/{base}/seed{wc.seed}.pt"] if base else []


rule essay_equivalences:
    output:
        csv="results/tables/essay_equivalences.csv",
        md="results/tables/essay_equivalences.md",
        tex="results/tables/essay_equivalences.tex",
    params:
        cfg=step_cfg("essay", "equivalences"),
        seeds=ESSAY_EQUIV_SEEDS,
    threads: 1
    log:
        "logs/essay/equivalences.log",
    shell:
        "{PY} -m algo_emu essay equivalences --params {params.cfg} --seeds {params.seeds} --out-csv {output.csv}"
        " > {log} 2>&1"


rule essay_train:
    input:
        init=_essay_init,
    output:
        model="results/essay/models/{evariant}/seed{seed}.pt",
        metrics="results/essay/models/{evariant}/seed{seed}.json",
    params:
        cfg=lambda wc: step_cfg("essay", "train", wc.evariant),
        init=lambda wc, input: f"--init {input.init[0]}" if input.init else "",
    threads: 1
    resources:
        mem_mb=2000,
        runtime=120,
    log:
        "logs/essay/train_{evariant}_seed{seed}.log",
    benchmark:
        "results/benchmarks/essay_train_{evariant}_seed{seed}.tsv"
    shell:
        "{PY} -m algo_emu essay train --params {params.cfg} --variant {wildcards.evariant} --seed {wildcards.seed}"
        " --device {DEVICE} --threads {threads} {params.init} --out-model {output.model}"
        " --out-metrics {output.metrics} > {log} 2>&1"


rule essay_evaluate:
    input:
        models=expand("results/essay/models/{v}/seed{{seed}}.pt", v=ESSAY_VARIANTS),
    output:
        raw="results/essay/eval/seed{seed}.pt",
        metrics="results/essay/eval/seed{seed}/metrics.json",
    params:
        cfg=step_cfg("essay", "evaluate"),
        models=lambda wc, input: " ".join(f"{v}={p}" for v, p in zip(ESSAY_VARIANTS, input.models)),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    log:
        "logs/essay/evaluate_seed{seed}.log",
    benchmark:
        "results/benchmarks/essay_evaluate_seed{seed}.tsv"
    shell:
        "{PY} -m algo_emu essay evaluate --params {params.cfg} --seed {wildcards.seed} --device {DEVICE}"
        " --threads {threads} --models {params.models} --out-raw {output.raw} --out-metrics {output.metrics}"
        " > {log} 2>&1"


rule essay_aggregate:
    input:
        raw=expand("results/essay/eval/seed{s}.pt", s=ESSAY_SEEDS),
        summaries=expand("results/essay/eval/seed{s}/metrics.json", s=ESSAY_SEEDS),
        train=expand("results/essay/models/{v}/seed{s}.json", v=ESSAY_VARIANTS, s=ESSAY_SEEDS),
        equivalences="results/tables/essay_equivalences.csv",
    output:
        claims=report("results/tables/essay_claims.csv", caption="../report/essay.rst", category="E6 essay",
                      subcategory="tables", labels={"name": "essay_claims.csv"}),
        md="results/tables/essay_claims.md",
        tex="results/tables/essay_claims.tex",
        curves="results/tables/essay_curves.csv",
        details="results/essay/claims_details.json",
    params:
        cfg=step_cfg("essay", "claims"),
    log:
        "logs/essay/aggregate.log",
    shell:
        "{PY} -m algo_emu essay claims --params {params.cfg} --raw {input.raw} --summaries {input.summaries}"
        " --train-metrics {input.train} --equivalences {input.equivalences} --out-claims {output.claims}"
        " --out-curves {output.curves} --out-details {output.details} > {log} 2>&1"


rule essay_icl_figure:
    input:
        curves="results/tables/essay_curves.csv",
    output:
        pdf="results/figures/essay_icl.pdf",
        png=report("results/figures/essay_icl.png", caption="../report/essay.rst", category="E6 essay",
                   subcategory="figures", labels={"name": "essay_icl.png"}),
    params:
        cfg=step_cfg("essay", "figure", "icl"),
        stem=lambda wc, output: output.pdf[: -len(".pdf")],
    log:
        "logs/essay/figure_icl.log",
    shell:
        "{PY} -m algo_emu essay figure --kind icl --params {params.cfg} --curves {input.curves}"
        " --out {params.stem} > {log} 2>&1"


rule essay_equivalences_figure:
    input:
        table="results/tables/essay_equivalences.csv",
    output:
        pdf="results/figures/essay_equivalences.pdf",
        png=report("results/figures/essay_equivalences.png", caption="../report/essay.rst", category="E6 essay",
                   subcategory="figures", labels={"name": "essay_equivalences.png"}),
    params:
        cfg=step_cfg("essay", "figure", "equivalences"),
        stem=lambda wc, output: output.pdf[: -len(".pdf")],
    log:
        "logs/essay/figure_equivalences.log",
    shell:
        "{PY} -m algo_emu essay figure --kind equivalences --params {params.cfg} --equivalences {input.table}"
        " --out {params.stem} > {log} 2>&1"

