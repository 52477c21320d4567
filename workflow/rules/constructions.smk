# E5, hand-built frozen attention (no training; Theorems 3.1, 4.1/4.2, Corollary 4.2.1).
# A fixed two-layer softmax attention module runs algorithms written into its prompt.
# Tables: results/tables/construction_{beta,p,n,d,library,multistep}.csv (+ .md, .tex);
# figures: results/figures/construction_<same>.{pdf,png}.
# The logic is in src/algo_emu/constructions/; docs/constructions.md explains the construction.

CONSTRUCTION_STUDIES = ["beta", "p", "n", "d"]
CONSTRUCTION_KINDS = CONSTRUCTION_STUDIES + ["library", "multistep"]
CONSTRUCTION_SEEDS = " ".join(str(s) for s in SEEDS)


wildcard_constraints:
    ckind="beta|p|n|d|library|multistep",


def construction_step(wildcards):
    """The CLI step that writes one construction table: `study --study <knob>` for an error study, else its kind."""
    if wildcards.ckind in CONSTRUCTION_STUDIES:
        return f"study --study {wildcards.ckind}"
    return wildcards.ckind


# One rule writes every construction table: the error studies (beta, p, n, d), the algorithm
# library and the multi-step run differ only in the CLI step (construction_step).
rule construction_table:
    output:
        csv=report("results/tables/construction_{ckind}.csv", caption="../report/constructions.rst", category="E5 hand-built constructions (Theorems 4.1/4.2)", subcategory="tables", labels={"name": "construction_{ckind}.csv"}),
        md="results/tables/construction_{ckind}.md",
        tex="results/tables/construction_{ckind}.tex",
        per_seed="results/constructions/{ckind}_per_seed.csv",
        meta="results/constructions/{ckind}.json",
    params:
        step=construction_step,
        cfg=lambda wc: step_cfg("constructions", "table", wc.ckind),
        seeds=CONSTRUCTION_SEEDS,
    threads: 2
    log:
        "logs/constructions/{ckind}.log",
    benchmark:
        "results/benchmarks/constructions_{ckind}.tsv"
    shell:
        "{PY} -m algo_emu constructions {params.step} --params {params.cfg}"
        " --seeds {params.seeds} --threads {threads} --out-csv {output.csv}"
        " --out-per-seed {output.per_seed} --out-meta {output.meta} > {log} 2>&1"


rule construction_figure:
    input:
        table="results/tables/construction_{ckind}.csv",
    output:
        pdf="results/figures/construction_{ckind}.pdf",
        png=report("results/figures/construction_{ckind}.png", caption="../report/constructions.rst", category="E5 hand-built constructions (Theorems 4.1/4.2)", subcategory="figures", labels={"name": "construction_{ckind}.png"}),
    params:
        stem=lambda wildcards, output: output.pdf[: -len(".pdf")],
    log:
        "logs/constructions/figure_{ckind}.log",
    shell:
        "{PY} -m algo_emu constructions figure --kind {wildcards.ckind} --table {input.table}"
        " --out {params.stem} > {log} 2>&1"

