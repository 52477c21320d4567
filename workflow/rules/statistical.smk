# E3: statistical algorithms from the prompt (Appendix C.1).
# data (per mode and seed: the training mixture, shared by every H) -> train (per mode and H: all seeds
# as one ensemble, saved frozen) and train_blind (the weight-blind
# baseline: same block, data and budget, tokens without the weights) -> evaluate (loads both read-only,
# per algorithm on fresh data, the model also with its prompt's weights ablated; proves the weights
# unchanged) -> aggregate (statistical_emulation, statistical_ablation) -> figures.
# Each rule runs `python -m algo_emu statistical <step> JOB`; its `job` param is built from the wildcards alone, its
# paths spelled out (Snakemake leaves a params function that takes `input` or `output` out of the rerun trigger).
import os

STAT = config["statistical"]
STAT_TABLES = expand("results/tables/statistical_emulation.{ext}", ext=["csv", "md", "tex"])
STAT_FIGURES = expand("results/figures/statistical_heads.{ext}", ext=["pdf", "png"])
STAT_ABLATION = expand("results/tables/statistical_ablation.{ext}", ext=["csv", "md", "tex"])
STAT_ABLATION_FIGURES = expand("results/figures/statistical_ablation.{ext}", ext=["pdf", "png"])


def statistical_metrics(wildcards=None):
    return [
        f"results/statistical/runs/{mode}_H{H}/seed{s}/metrics.json"
        for mode in STAT["modes"]
        for H in STAT["heads_sweep"]
        for s in SEEDS
    ]


def statistical_train_data(wildcards):
    """Every seed's training data set of the mode, in SEEDS order (the job's `seeds`)."""
    return [f"data/statistical/{wildcards.stat_mode}/seed{s}/dataset.pt" for s in SEEDS]


# One (mode, seed)'s training data set: generated once (fitted mode: lasso fits for a quarter of the
# prompts), read by the model and the weight-blind baseline of every H. Its params are the data keys
# alone, so a new H or another training budget reuses it.
rule statistical_data:
    output:
        data="data/statistical/{stat_mode}/seed{seed}/dataset.pt",
        meta="data/statistical/{stat_mode}/seed{seed}/dataset.pt.json",
    wildcard_constraints:
        stat_mode="fitted|reference_code",
    params:
        job=lambda wc: step_job(
            params=step_cfg("statistical", "data"), mode=wc.stat_mode, seed=int(wc.seed),
            path=f"data/statistical/{wc.stat_mode}/seed{wc.seed}/dataset.pt"),
    log:
        "logs/statistical/data_{stat_mode}_seed{seed}.log",
    benchmark:
        "results/benchmarks/statistical_data_{stat_mode}_seed{seed}.tsv"
    resources:
        # one seed's prompts (N x (n + m) x (2d + 2)) in float64 and float32 plus generation temporaries
        mem_mb=lambda wc: 1000 + STAT["n_prompts"] * (STAT["n_context"] + STAT["n_query"]) * (2 * STAT["d"] + 2) * 8 * 4 // 10**6,
        runtime=lambda wc: 10 + STAT["n_prompts"] // 10000,
    shell:
        "{PY} -m algo_emu statistical data {params.job} > {log} 2>&1"


if not GROUPED:

    rule statistical_train:
        input:
            data=statistical_train_data,
        output:
            model="results/statistical/models/{stat_mode}_H{heads}.pt",
            sidecar="results/statistical/models/{stat_mode}_H{heads}.pt.json",
        wildcard_constraints:
            stat_mode="fitted|reference_code",
        params:
            job=lambda wc: step_job(
                params=step_cfg("statistical", "train"), mode=wc.stat_mode, H=int(wc.heads), seeds=SEEDS,
                data_paths=statistical_train_data(wc),
                model_path=f"results/statistical/models/{wc.stat_mode}_H{wc.heads}.pt", device_spec=DEVICE,
                checkpoint=f"results/statistical/checkpoints/{wc.stat_mode}_H{wc.heads}.pt"),
        log:
            "logs/statistical/train_{stat_mode}_H{heads}.log",
        benchmark:
            "results/benchmarks/statistical_train_{stat_mode}_H{heads}.tsv"
        threads: config["threads"]
        resources:
            # every seed's prompts (N x (n + m) x (2d + 2) float32), loaded and stacked; the weight-blind
            # baseline below has the same prompts and budget and a narrower input layer
            mem_mb=lambda wc: 2000 + len(SEEDS) * STAT["n_prompts"] * (STAT["n_context"] + STAT["n_query"]) * (2 * STAT["d"] + 2) * 4 // 10**6 * 2,
            runtime=lambda wc: 30 + 10 * STAT["epochs"],
        shell:
            "{PY} -m algo_emu statistical train {params.job} --threads {threads} > {log} 2>&1"


    # The weight-blind baseline of each (mode, H): the same job as statistical_train (resources, shell) with
    # `blind` (tokens without the weights), its own model file, checkpoint, log and benchmark.
    use rule statistical_train as statistical_train_blind with:
        output:
            model="results/statistical/models/{stat_mode}_H{heads}_blind.pt",
            sidecar="results/statistical/models/{stat_mode}_H{heads}_blind.pt.json",
        params:
            job=lambda wc: step_job(
                params=step_cfg("statistical", "train"), mode=wc.stat_mode, H=int(wc.heads), seeds=SEEDS,
                data_paths=statistical_train_data(wc),
                model_path=f"results/statistical/models/{wc.stat_mode}_H{wc.heads}_blind.pt", device_spec=DEVICE,
                blind=True, checkpoint=f"results/statistical/checkpoints/{wc.stat_mode}_H{wc.heads}_blind.pt"),
        log:
            "logs/statistical/train_blind_{stat_mode}_H{heads}.log",
        benchmark:
            "results/benchmarks/statistical_train_blind_{stat_mode}_H{heads}.tsv"

else:
    # One job per shape group (algo_emu.grouping): the (mode, H)'s model and its weight-blind baseline as one
    # ensemble from one copy of the data, each saved as its own job saves it.
    rule statistical_train_group:
        input:
            data=statistical_train_data,
        output:
            model="results/statistical/models/{stat_mode}_H{heads}.pt",
            sidecar="results/statistical/models/{stat_mode}_H{heads}.pt.json",
            blind="results/statistical/models/{stat_mode}_H{heads}_blind.pt",
            blind_sidecar="results/statistical/models/{stat_mode}_H{heads}_blind.pt.json",
        wildcard_constraints:
            stat_mode="fitted|reference_code",
        params:
            job=lambda wc: step_job(
                params=step_cfg("statistical", "train"), mode=wc.stat_mode, H=int(wc.heads), seeds=SEEDS,
                data_paths=statistical_train_data(wc),
                model_path=f"results/statistical/models/{wc.stat_mode}_H{wc.heads}.pt",
                blind_path=f"results/statistical/models/{wc.stat_mode}_H{wc.heads}_blind.pt", device_spec=DEVICE,
                **GROUP_ARGS, checkpoint=f"results/statistical/checkpoints/group_{wc.stat_mode}_H{wc.heads}.pt"),
        log:
            "logs/statistical/train_group_{stat_mode}_H{heads}.log",
        benchmark:
            "results/benchmarks/statistical_train_group_{stat_mode}_H{heads}.tsv"
        threads: config["threads"]
        resources:
            gpu=1,  # a GPU slot of the gpu-local profile (unlimited where no `gpu` resource is given)
            mem_mb=lambda wc: 2000 + len(SEEDS) * STAT["n_prompts"] * (STAT["n_context"] + STAT["n_query"]) * (2 * STAT["d"] + 2) * 4 // 10**6 * 3,
            runtime=lambda wc: 30 + 20 * STAT["epochs"],
        shell:
            "{PY} -m algo_emu statistical train {params.job} --threads {threads} > {log} 2>&1"


rule statistical_evaluate:
    input:
        model="results/statistical/models/{stat_mode}_H{heads}.pt",
        sidecar="results/statistical/models/{stat_mode}_H{heads}.pt.json",
        blind="results/statistical/models/{stat_mode}_H{heads}_blind.pt",
        blind_sidecar="results/statistical/models/{stat_mode}_H{heads}_blind.pt.json",
    output:
        expand("results/statistical/runs/{{stat_mode}}_H{{heads}}/seed{seed}/metrics.json", seed=SEEDS),
    wildcard_constraints:
        stat_mode="fitted|reference_code",
    params:
        job=lambda wc: step_job(
            params=step_cfg("statistical", "evaluate"), mode=wc.stat_mode, H=int(wc.heads), seeds=SEEDS,
            model_path=f"results/statistical/models/{wc.stat_mode}_H{wc.heads}.pt",
            blind_path=f"results/statistical/models/{wc.stat_mode}_H{wc.heads}_blind.pt",
            out_dir=f"results/statistical/runs/{wc.stat_mode}_H{wc.heads}", device_spec=DEVICE),
    log:
        "logs/statistical/evaluate_{stat_mode}_H{heads}.log",
    benchmark:
        "results/benchmarks/statistical_evaluate_{stat_mode}_H{heads}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=2000,
        runtime=30,
    shell:
        "{PY} -m algo_emu statistical evaluate {params.job} --threads {threads} > {log} 2>&1"


rule statistical_aggregate:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        statistical_metrics,
    output:
        runs=report("results/tables/statistical_runs.csv", caption="../report/statistical_tables.rst", category="E3 statistical algorithms (Appendix C.1)", subcategory="tables", labels={"name": "statistical_runs.csv (per seed)"}),
        tables=[report(t, caption="../report/statistical_tables.rst", category="E3 statistical algorithms (Appendix C.1)", subcategory="tables", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in STAT_TABLES],
        ablation=[report(t, caption="../report/ablation.rst", category="E3 statistical algorithms (Appendix C.1)", subcategory="ablations", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in STAT_ABLATION],
        ablation_runs=report("results/tables/statistical_ablation_runs.csv", caption="../report/ablation.rst", category="E3 statistical algorithms (Appendix C.1)", subcategory="ablations", labels={"name": "statistical_ablation_runs.csv (per seed)"}),
    params:
        job=lambda wc: step_job(
            params=step_cfg("statistical", "aggregate"), metrics=statistical_metrics(),
            runs_csv="results/tables/statistical_runs.csv", table_csv=STAT_TABLES[0], ablation_csv=STAT_ABLATION[0],
            ablation_runs_csv="results/tables/statistical_ablation_runs.csv"),
    log:
        "logs/statistical/aggregate.log",
    shell:
        "{PY} -m algo_emu statistical aggregate {params.job} > {log} 2>&1"


rule statistical_heads_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/statistical_emulation.csv",
        runs="results/tables/statistical_runs.csv",
    output:
        [report(f, caption="../report/statistical_heads.rst", category="E3 statistical algorithms (Appendix C.1)", subcategory="figures", labels={"name": "statistical_heads.png"}) if f.endswith(".png") else f for f in STAT_FIGURES],
    params:
        job=lambda wc: step_job(table="results/tables/statistical_emulation.csv",
                                runs_csv="results/tables/statistical_runs.csv",
                                out=os.path.splitext(STAT_FIGURES[0])[0]),
    log:
        "logs/statistical/figure.log",
    shell:
        "{PY} -m algo_emu statistical figure {params.job} > {log} 2>&1"


rule statistical_ablation_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/statistical_ablation.csv",
        runs="results/tables/statistical_ablation_runs.csv",
    output:
        [report(f, caption="../report/ablation.rst", category="E3 statistical algorithms (Appendix C.1)", subcategory="ablations", labels={"name": "statistical_ablation.png"}) if f.endswith(".png") else f for f in STAT_ABLATION_FIGURES],
    params:
        job=lambda wc: step_job(table="results/tables/statistical_ablation.csv",
                                runs_csv="results/tables/statistical_ablation_runs.csv",
                                out=os.path.splitext(STAT_ABLATION_FIGURES[0])[0]),
    log:
        "logs/statistical/ablation_figure.log",
    shell:
        "{PY} -m algo_emu statistical ablation-figure {params.job} > {log} 2>&1"

