# E2: one softmax head emulating f(w^T x - y) x (Theorem 3.1) and the GD step built from it.
# train (per p: all seeds x all f as one ensemble; data generated in the job, deterministic
# in the seed; then frozen and evaluated with w in the prompt ablated) and blind (the weight-blind
# baseline of each p: same block, data and budget, tokens without w) -> aggregate (tables
# f_emulation, f_gd_step, f_emulation_ablation) -> figures.
import os

T31 = config["theorem31"]
T31_F_TABLES = expand("results/tables/f_emulation.{ext}", ext=["csv", "md", "tex"])
T31_GD_TABLES = expand("results/tables/f_gd_step.{ext}", ext=["csv", "md", "tex"])
T31_FIGURES = expand("results/figures/f_emulation.{ext}", ext=["pdf", "png"])
T31_ABLATION = expand("results/tables/f_emulation_ablation.{ext}", ext=["csv", "md", "tex"])
T31_ABLATION_FIGURES = expand("results/figures/f_emulation_ablation.{ext}", ext=["pdf", "png"])
T31_RUNS = "results/tables/theorem31_runs.csv"
T31_ABLATION_RUNS = "results/tables/f_emulation_ablation_runs.csv"
# A job's arguments are built from the wildcards alone (a params function taking input or output is no rerun
# trigger in Snakemake), so its paths come from these names, the ones the rules' inputs and outputs use.


def theorem31_metrics(wildcards=None):
    return [f"results/theorem31/runs/p{p}/seed{s}/metrics.json" for p in T31["p_sweep"] for s in SEEDS]


def theorem31_blind_metrics(wildcards=None):
    return [f"results/theorem31/blind/p{p}/seed{s}/metrics.json" for p in T31["p_sweep"] for s in SEEDS]


if not GROUPED:

    rule theorem31_train:
        output:
            expand("results/theorem31/runs/p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
            model="results/theorem31/runs/p{p}/model.pt",  # the frozen model the records were evaluated from
        params:
            job=lambda wc: step_job(
                params=step_cfg("theorem31", "train"), p=int(wc.p), seeds=SEEDS, device_spec=DEVICE,
                out_dir=f"results/theorem31/runs/p{wc.p}", checkpoint=f"results/theorem31/checkpoints/p{wc.p}.pt"),
        log:
            "logs/theorem31/train_p{p}.log",
        benchmark:
            "results/benchmarks/theorem31_train_p{p}.tsv"
        threads: config["threads"]
        resources:
            # the prompts of every seed (N x n x (2d+1) float32, twice while they are stacked), every member's
            # precomputed training targets (at most N x n x d float32 per seed and f) plus the model and its Adam
            # state; the weight-blind baseline below has the same prompts, targets and budget and a narrower input layer
            mem_mb=lambda wc: 1500 + len(SEEDS) * T31["n_prompts"] * T31["n_tokens"] * (
                (2 * T31["d"] + 1) * 2 + T31["d"] * len(T31["fs"])) * 4 // 10**6,
            runtime=lambda wc: 30 + 15 * T31["epochs"],
        shell:
            "{PY} -m algo_emu theorem31 train {params.job} --threads {threads} > {log} 2>&1"


    # The weight-blind baseline of each p: the same job as theorem31_train (resources, shell) with `blind`
    # (tokens [x_i; y_i] without w), its own outputs, checkpoint, log and benchmark.
    use rule theorem31_train as theorem31_train_blind with:
        output:
            expand("results/theorem31/blind/p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
            model="results/theorem31/blind/p{p}/model.pt",
        params:
            job=lambda wc: step_job(
                params=step_cfg("theorem31", "train"), p=int(wc.p), seeds=SEEDS, device_spec=DEVICE, blind=True,
                out_dir=f"results/theorem31/blind/p{wc.p}", checkpoint=f"results/theorem31/checkpoints/blind_p{wc.p}.pt"),
        log:
            "logs/theorem31/train_blind_p{p}.log",
        benchmark:
            "results/benchmarks/theorem31_train_blind_p{p}.tsv"

else:
    # One job per shape group (algo_emu.grouping): p's model and its weight-blind baseline as one ensemble
    # from one copy of the data, each with the records its own job writes.
    rule theorem31_train_group:
        output:
            expand("results/theorem31/runs/p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
            expand("results/theorem31/blind/p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
            model="results/theorem31/runs/p{p}/model.pt",
            blind_model="results/theorem31/blind/p{p}/model.pt",
        params:
            job=lambda wc: step_job(
                params=step_cfg("theorem31", "train"), p=int(wc.p), seeds=SEEDS, device_spec=DEVICE, **GROUP_ARGS,
                out_dir=f"results/theorem31/runs/p{wc.p}", blind_out_dir=f"results/theorem31/blind/p{wc.p}",
                checkpoint=f"results/theorem31/checkpoints/group_p{wc.p}.pt"),
        log:
            "logs/theorem31/train_group_p{p}.log",
        benchmark:
            "results/benchmarks/theorem31_train_group_p{p}.tsv"
        threads: config["threads"]
        resources:
            gpu=1,  # a GPU slot of the gpu-local profile (unlimited where no `gpu` resource is given)
            mem_mb=lambda wc: 1500 + len(SEEDS) * T31["n_prompts"] * T31["n_tokens"] * (
                (2 * T31["d"] + 1) * 3 + T31["d"] * len(T31["fs"])) * 4 // 10**6,
            runtime=lambda wc: 30 + 30 * T31["epochs"],
        shell:
            "{PY} -m algo_emu theorem31 train {params.job} --threads {threads} > {log} 2>&1"


rule theorem31_aggregate:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        metrics=theorem31_metrics,
        blind=theorem31_blind_metrics,
    output:
        runs=report(T31_RUNS, caption="../report/theorem31_tables.rst", category="E2 Theorem 3.1", subcategory="tables", labels={"name": "theorem31_runs.csv (per seed)"}),
        tables=[report(t, caption="../report/theorem31_tables.rst", category="E2 Theorem 3.1", subcategory="tables", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in T31_F_TABLES],
        gd_tables=[report(t, caption="../report/theorem31_tables.rst", category="E2 Theorem 3.1", subcategory="tables", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in T31_GD_TABLES],
        ablation=[report(t, caption="../report/ablation.rst", category="E2 Theorem 3.1", subcategory="ablations", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in T31_ABLATION],
        ablation_runs=report(T31_ABLATION_RUNS, caption="../report/ablation.rst", category="E2 Theorem 3.1", subcategory="ablations", labels={"name": "f_emulation_ablation_runs.csv (per seed)"}),
    params:
        job=step_job(
            params=step_cfg("theorem31", "aggregate"), metrics=theorem31_metrics(), blind_metrics=theorem31_blind_metrics(),
            runs_csv=T31_RUNS, f_csv=T31_F_TABLES[0], gd_csv=T31_GD_TABLES[0],
            ablation_csv=T31_ABLATION[0], ablation_runs_csv=T31_ABLATION_RUNS),
    log:
        "logs/theorem31/aggregate.log",
    shell:
        "{PY} -m algo_emu theorem31 aggregate {params.job} > {log} 2>&1"


rule theorem31_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table=T31_F_TABLES[0],
        gd=T31_GD_TABLES[0],
        runs=T31_RUNS,
    output:
        [report(f, caption="../report/f_emulation.rst", category="E2 Theorem 3.1", subcategory="figures", labels={"name": "f_emulation.png"}) if f.endswith(".png") else f for f in T31_FIGURES],
    params:
        job=step_job(table=T31_F_TABLES[0], gd_table=T31_GD_TABLES[0], runs_csv=T31_RUNS,
                     out=os.path.splitext(T31_FIGURES[0])[0]),
    log:
        "logs/theorem31/figure.log",
    shell:
        "{PY} -m algo_emu theorem31 figure {params.job} > {log} 2>&1"


rule theorem31_ablation_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table=T31_ABLATION[0],
        runs=T31_ABLATION_RUNS,
    output:
        [report(f, caption="../report/ablation.rst", category="E2 Theorem 3.1", subcategory="ablations", labels={"name": "f_emulation_ablation.png"}) if f.endswith(".png") else f for f in T31_ABLATION_FIGURES],
    params:
        job=step_job(table=T31_ABLATION[0], runs_csv=T31_ABLATION_RUNS,
                     out=os.path.splitext(T31_ABLATION_FIGURES[0])[0]),
    log:
        "logs/theorem31/ablation_figure.log",
    shell:
        "{PY} -m algo_emu theorem31 ablation-figure {params.job} > {log} 2>&1"

