# E5, hand-built frozen attention (no training; Theorems 3.1, 4.1/4.2, Corollary 4.2.1).
# A fixed two-layer softmax attention module runs algorithms written into its prompt.
# Tables: results/tables/construction_{beta,p,n,d,library,multistep}.csv (+ .md, .tex);
# figures: results/figures/construction_<same>.{pdf,png}.
# The logic is in src/algo_emu/constructions/; docs/constructions.md explains the construction.

CONSTRUCTION_STUDIES = ["beta", "p", "n", "d"]
CONSTRUCTION_KINDS = CONSTRUCTION_STUDIES + ["library", "multistep"]
CONSTRUCTION_SEEDS = " ".join(str(s) for s in SEEDS)


wildcard_constraints:
    cstudy="beta|p|n|d",
    ckind="beta|p|n|d|library|multistep",


rule construction_study:
    output:
        csv="results/tables/construction_{cstudy}.csv",
        md="results/tables/construction_{cstudy}.md",
        tex="results/tables/construction_{cstudy}.tex",
        per_seed="results/constructions/{cstudy}_per_seed.csv",
        meta="results/constructions/{cstudy}.json",
    params:
        cfg=as_json(config["constructions"]),
        seeds=CONSTRUCTION_SEEDS,
    threads: 2
    log:
        "logs/constructions/study_{cstudy}.log",
    benchmark:
        "results/benchmarks/constructions_study_{cstudy}.tsv"
    shell:
        "{PY} -m algo_emu constructions study --study {wildcards.cstudy} --params {params.cfg}"
        " --seeds {params.seeds} --threads {threads} --out-csv {output.csv}"
        " --out-per-seed {output.per_seed} --out-meta {output.meta} > {log} 2>&1"


rule construction_library:
    output:
        csv="results/tables/construction_library.csv",
        md="results/tables/construction_library.md",
        tex="results/tables/construction_library.tex",
        per_seed="results/constructions/library_per_seed.csv",
        meta="results/constructions/library.json",
    params:
        cfg=as_json(config["constructions"]),
        seeds=CONSTRUCTION_SEEDS,
    threads: 2
    log:
        "logs/constructions/library.log",
    benchmark:
        "results/benchmarks/constructions_library.tsv"
    shell:
        "{PY} -m algo_emu constructions library --params {params.cfg}"
        " --seeds {params.seeds} --threads {threads} --out-csv {output.csv}"
        " --out-per-seed {output.per_seed} --out-meta {output.meta} > {log} 2>&1"


rule construction_multistep:
    output:
        csv="results/tables/construction_multistep.csv",
        md="results/tables/construction_multistep.md",
        tex="results/tables/construction_multistep.tex",
        per_seed="results/constructions/multistep_per_seed.csv",
        meta="results/constructions/multistep.json",
    params:
        cfg=as_json(config["constructions"]),
        seeds=CONSTRUCTION_SEEDS,
    threads: 2
    log:
        "logs/constructions/multistep.log",
    benchmark:
        "results/benchmarks/constructions_multistep.tsv"
    shell:
        "{PY} -m algo_emu constructions multistep --params {params.cfg}"
        " --seeds {params.seeds} --threads {threads} --out-csv {output.csv}"
        " --out-per-seed {output.per_seed} --out-meta {output.meta} > {log} 2>&1"


rule construction_figure:
    input:
        table="results/tables/construction_{ckind}.csv",
    output:
        pdf="results/figures/construction_{ckind}.pdf",
        png="results/figures/construction_{ckind}.png",
    params:
        cfg=as_json(config["constructions"]),
        stem="results/figures/construction_{ckind}",
    log:
        "logs/constructions/figure_{ckind}.log",
    shell:
        "{PY} -m algo_emu constructions figure --kind {wildcards.ckind} --params {params.cfg} --table {input.table}"
        " --out-stem {params.stem} > {log} 2>&1"


rule construction_tables:
    input:
        expand("results/tables/construction_{k}.{ext}", k=CONSTRUCTION_KINDS, ext=["csv", "md", "tex"]),


rule construction_figures:
    input:
        expand("results/figures/construction_{k}.{ext}", k=CONSTRUCTION_KINDS, ext=["pdf", "png"]),


rule construction_studies:
    input:
        expand("results/tables/construction_{k}.csv", k=CONSTRUCTION_STUDIES),
        expand("results/figures/construction_{k}.{ext}", k=CONSTRUCTION_STUDIES, ext=["pdf", "png"]),


rule construction_library_all:
    input:
        rules.construction_library.output,
        expand("results/figures/construction_library.{ext}", ext=["pdf", "png"]),


rule construction_multistep_all:
    input:
        rules.construction_multistep.output,
        expand("results/figures/construction_multistep.{ext}", ext=["pdf", "png"]),


ALL_OUTPUTS.extend(
    expand("results/tables/construction_{k}.{ext}", k=CONSTRUCTION_KINDS, ext=["csv", "md", "tex"])
    + expand("results/figures/construction_{k}.{ext}", k=CONSTRUCTION_KINDS, ext=["pdf", "png"])
)
