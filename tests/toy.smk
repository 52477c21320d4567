# The toy experiment's rules (tests/toy_experiment.py): the model and its weight-blind baseline, then the table,
# the figure; the replication report and the manifest pick them up through the toy's spec.
TOY_RECORDS = {kind: expand(f"results/toy/{kind}/seed{{seed}}/metrics.json", seed=SEEDS) for kind in ("runs", "blind")}

rule toy_train:
    output:
        TOY_RECORDS["runs"],
    params:
        job=step_job(params=step_cfg("toy", "train"), seeds=SEEDS, out_dir="results/toy/runs", device_spec=DEVICE),
    log:
        "logs/toy/train.log",
    shell:
        "{PY} -m algo_emu toy train {params.job} --threads 1 > {log} 2>&1"

use rule toy_train as toy_blind with:
    output:
        TOY_RECORDS["blind"],
    params:
        job=step_job(params=step_cfg("toy", "train"), seeds=SEEDS, out_dir="results/toy/blind", device_spec=DEVICE,
                     blind=True),
    log:
        "logs/toy/blind.log",

rule toy_aggregate:
    input:
        model=TOY_RECORDS["runs"],
        blind=TOY_RECORDS["blind"],
    output:
        expand("results/tables/toy.{ext}", ext=["csv", "md", "tex"]),
    params:
        job=step_job(model=TOY_RECORDS["runs"], blind=TOY_RECORDS["blind"], out_csv="results/tables/toy.csv"),
    log:
        "logs/toy/aggregate.log",
    shell:
        "{PY} -m algo_emu toy aggregate {params.job} > {log} 2>&1"

rule toy_figure:
    input:
        "results/tables/toy.csv",
    output:
        expand("results/figures/toy.{ext}", ext=["pdf", "png"]),
    params:
        job=step_job(table="results/tables/toy.csv", out="results/figures/toy"),
    log:
        "logs/toy/figure.log",
    shell:
        "{PY} -m algo_emu toy figure {params.job} > {log} 2>&1"
