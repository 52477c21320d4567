# E5, hand-built frozen attention (no training; Theorems 3.1, 4.1/4.2, Corollary 4.2.1).
# A fixed two-layer softmax attention module runs algorithms written into its prompt.
# Tables: results/tables/construction_{beta,p,n,d,library,multistep}.csv (+ .md, .tex);
# figures: results/figures/construction_<same>.{pdf,png}.
# The logic is in src/algo_emu/constructions/; docs/constructions.md explains the construction.

CONSTRUCTION_STUDIES = ["beta", "p", "n", "d"]
CONSTRUCTION_KINDS = CONSTRUCTION_STUDIES + ["library", "multistep"]


wildcard_constraints:
    ckind="beta|p|n|d|library|multistep",


def construction_step(wildcards):
    """The CLI step that writes one construction table: `study` for an error study, else its kind."""
    return "study" if wildcards.ckind in CONSTRUCTION_STUDIES else wildcards.ckind


def construction_job(wildcards):
    """The job of one construction table: an error study names its knob (`study`). Built from the wildcards
    alone, its paths spelled out: Snakemake leaves a params function that takes `input` or `output` out of the
    rerun trigger (a "derived" param)."""
    ckind = wildcards.ckind
    knob = {"study": ckind} if ckind in CONSTRUCTION_STUDIES else {}
    return step_job(**knob, params=step_cfg("constructions", "table", ckind), seeds=SEEDS,
                    out_csv=f"results/tables/construction_{ckind}.csv",
                    out_per_seed=f"results/constructions/{ckind}_per_seed.csv",
                    out_meta=f"results/constructions/{ckind}.json")


# One rule writes every construction table: the error studies (beta, p, n, d), the algorithm
# library and the multi-step run differ only in the CLI step (construction_step) and, for a study, its knob.
rule construction_table:
    output:
        csv=report("results/tables/construction_{ckind}.csv", caption="../report/constructions.rst", category="E5 hand-built constructions (Theorems 4.1/4.2)", subcategory="tables", labels={"name": "construction_{ckind}.csv"}),
        md="results/tables/construction_{ckind}.md",
        tex="results/tables/construction_{ckind}.tex",
        per_seed="results/constructions/{ckind}_per_seed.csv",
        meta="results/constructions/{ckind}.json",
    params:
        step=construction_step,
        job=construction_job,
    threads: 2
    log:
        "logs/constructions/{ckind}.log",
    benchmark:
        "results/benchmarks/constructions_{ckind}.tsv"
    shell:
        "{PY} -m algo_emu constructions {params.step} {params.job} --threads {threads} > {log} 2>&1"


rule construction_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/construction_{ckind}.csv",
    output:
        pdf="results/figures/construction_{ckind}.pdf",
        png=report("results/figures/construction_{ckind}.png", caption="../report/constructions.rst", category="E5 hand-built constructions (Theorems 4.1/4.2)", subcategory="figures", labels={"name": "construction_{ckind}.png"}),
    params:
        job=lambda wc: step_job(kind=wc.ckind, table=f"results/tables/construction_{wc.ckind}.csv",
                                out=f"results/figures/construction_{wc.ckind}"),
    log:
        "logs/constructions/figure_{ckind}.log",
    shell:
        "{PY} -m algo_emu constructions figure {params.job} > {log} 2>&1"

