# E1: attention emulating an attention head (the headline result).
# data (per seed) -> train (per setting, all seeds x K/Q/V as one ensemble)
# -> aggregate (tables) -> fit -> figures.
# Each rule runs `python -m algo_emu heads <step> JOB` (algo_emu.cli). Its `job` param is built from the wildcards
# alone, its paths spelled out: Snakemake leaves a params function that takes `input` or `output` out of the rerun
# trigger (a "derived" param), and the job holds the config keys the step reads, the seeds and the device.
import os

from algo_emu.experiments.heads_settings import settings as _heads_settings, setting_name as _heads_setting_name
from algo_emu.grouping import heads_groups as _heads_groups
from algo_emu.experiments.heads_settings import (
    variant_protocol as _variant_protocol,
    variant_train_params as _variant_train_params,
)

HEADS = config["heads"]
HEADS_SETTINGS = _heads_settings(HEADS)
HEADS_TABLES = [
    "results/tables/heads_vs_mse.csv",
    "results/tables/heads_vs_mse.md",
    "results/tables/heads_vs_mse.tex",
    "results/tables/prompt_length_vs_mse.csv",
    "results/tables/prompt_length_vs_mse.md",
    "results/tables/prompt_length_vs_mse.tex",
    "results/tables/heads_runs.csv",
]
HEADS_FIGURES = expand("results/figures/heads_vs_mse.{ext}", ext=["pdf", "png"])
P_FIGURES = expand("results/figures/prompt_length_vs_mse.{ext}", ext=["pdf", "png"])
# Variants (heads.variants): diagnostic runs of ours, never paper-comparable; built by the named target
# `heads_variants`, not by `all` (at the paper's scale they cost as much as several sweep settings).
HEADS_VARIANTS = {v["name"]: v for v in HEADS["variants"]}
HEADS_VARIANTS_TABLES = expand("results/tables/heads_variants.{ext}", ext=["csv", "md", "tex"])
HEADS_VARIANTS_CURVES = "results/tables/heads_variants_curves.csv"
HEADS_VARIANTS_FIGURES = expand("results/figures/heads_variants.{ext}", ext=["pdf", "png"])


def heads_metrics(wildcards=None):
    return [
        f"results/heads/{protocol}/runs/{_heads_setting_name(H, p)}/seed{s}/metrics.json"
        for protocol, H, p in HEADS_SETTINGS
        for s in SEEDS
    ]


def heads_train_data(wildcards):
    """independent: one data set per seed; published: the one shared data set."""
    return heads_protocol_data(wildcards.protocol)


def heads_protocol_data(protocol):
    if protocol == "published":
        return ["data/heads/published/dataset.pt"]
    return [f"data/heads/seed{s}/dataset.pt" for s in SEEDS]


rule heads_data:
    output:
        data="data/heads/seed{seed}/dataset.pt",
        meta="data/heads/seed{seed}/dataset.pt.json",
    params:
        job=lambda wc: step_job(params=step_cfg("heads", "data"), seed=int(wc.seed),
                                path=f"data/heads/seed{wc.seed}/dataset.pt"),
    log:
        "logs/heads/data_seed{seed}.log",
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "{PY} -m algo_emu heads data {params.job} > {log} 2>&1"


rule heads_data_published:
    output:
        data="data/heads/published/dataset.pt",
        meta="data/heads/published/dataset.pt.json",
    params:
        job=lambda wc: step_job(params=step_cfg("heads", "data"), protocol="published", seed=0,
                                path="data/heads/published/dataset.pt"),
    log:
        "logs/heads/data_published.log",
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "{PY} -m algo_emu heads data {params.job} > {log} 2>&1"


if not GROUPED:

    rule heads_train:
        input:
            heads_train_data,
        output:
            expand("results/heads/{{protocol}}/runs/H{{heads}}_p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
            model="results/heads/{protocol}/runs/H{heads}_p{p}/model.pt",  # the frozen model the records were evaluated from
        params:
            job=lambda wc: step_job(
                params=step_cfg("heads", "train", wc.protocol), protocol=wc.protocol, H=int(wc.heads), p=int(wc.p),
                seeds=SEEDS, data_paths=heads_train_data(wc), device_spec=DEVICE,
                out_dir=f"results/heads/{wc.protocol}/runs/H{wc.heads}_p{wc.p}",
                checkpoint=f"results/heads/checkpoints/{wc.protocol}_H{wc.heads}_p{wc.p}.pt"),
        log:
            "logs/heads/train_{protocol}_H{heads}_p{p}.log",
        benchmark:
            "results/benchmarks/heads_train_{protocol}_H{heads}_p{p}.tsv"
        threads: config["threads"]
        resources:
            # Peak at the paper's scale, per seed: train prompts 77 MB + test prompts and
            # the three emulators' test predictions (float32) ~190 MB; plus ~1 GB of
            # torch/python. Quick config measured 440-590 MB max_rss (results/benchmarks/).
            mem_mb=lambda wc: 1200 + 300 * len(SEEDS),
            # minutes: benchmarks/engine.json measures 3.5-15 s per epoch per seed on 2 CPU
            # cores at the paper's shapes; 30 s (2x margin) per epoch per seed, plus start-up.
            runtime=lambda wc: 10 + (HEADS["epochs"] * len(SEEDS) * HEADS["n_prompts"] // 50000 + 1) // 2,
        shell:
            "{PY} -m algo_emu heads train {params.job} --threads {threads} > {log} 2>&1"

else:
    # One job per shape group (algo_emu.grouping.heads_groups): the protocols' settings of one (H, p) as one
    # ensemble, each setting's records as heads_train writes them. A rule per group, so a new H adds its own.
    for (_H, _p), _protocols in _heads_groups(HEADS_SETTINGS).items():

        rule:
            name:
                f"heads_train_group_H{_H}_p{_p}"
            input:
                [f for protocol in _protocols for f in heads_protocol_data(protocol)],
            output:
                [f"results/heads/{protocol}/runs/{_heads_setting_name(_H, _p)}/{f}"
                 for protocol in _protocols for f in [*(f"seed{s}/metrics.json" for s in SEEDS), "model.pt"]],
            params:
                # built here, not in a lambda: a lambda would read the loop's last (H, p). The independent
                # protocol's keys (heads.target besides the published protocol's) when it is here.
                job=step_job(
                    params=step_cfg("heads", "train", "independent" if "independent" in _protocols else "published"),
                    protocols=list(_protocols), H=_H, p=_p, seeds=SEEDS,
                    data_paths=[f for protocol in _protocols for f in heads_protocol_data(protocol)],
                    out_root="results/heads", checkpoint=f"results/heads/checkpoints/group_H{_H}_p{_p}.pt",
                    device_spec=DEVICE, **GROUP_ARGS),
            log:
                f"logs/heads/train_group_H{_H}_p{_p}.log",
            benchmark:
                f"results/benchmarks/heads_train_group_H{_H}_p{_p}.tsv"
            threads: config["threads"]
            resources:
                gpu=1,  # a GPU slot of the gpu-local profile (unlimited where no `gpu` resource is given)
                mem_mb=len(_protocols) * (1200 + 300 * len(SEEDS)),
                runtime=10 + len(_protocols) * (HEADS["epochs"] * len(SEEDS) * HEADS["n_prompts"] // 50000 + 1) // 2,
            shell:
                "{PY} -m algo_emu heads train-group {params.job} --threads {threads} > {log} 2>&1"


def heads_variant_data(wildcards):
    v = HEADS_VARIANTS[wildcards.variant]
    if _variant_protocol(v) == "published":
        return ["data/heads/published/dataset.pt"]
    return [f"data/heads/seed{s}/dataset.pt" for s in v["seeds"]]


rule heads_variant_train:
    input:
        heads_variant_data,
    output:
        # <variant>/seed<k>/metrics.json for each of its seeds (a variant's seeds are its own, so the directory)
        directory("results/heads/variants/{variant}"),
    params:
        # the heads train keys with the variant's overrides: a section key it overrides is not its rerun trigger
        job=lambda wc: step_job(
            params=_variant_train_params(HEADS, wc.variant), protocol=_variant_protocol(HEADS_VARIANTS[wc.variant]),
            H=HEADS_VARIANTS[wc.variant]["heads"], p=HEADS_VARIANTS[wc.variant]["p"],
            seeds=list(HEADS_VARIANTS[wc.variant]["seeds"]), data_paths=heads_variant_data(wc),
            out_dir=f"results/heads/variants/{wc.variant}",
            device_spec=DEVICE, variant=wc.variant, checkpoint=f"results/heads/checkpoints/variants/{wc.variant}.pt"),
    log:
        "logs/heads/variant_{variant}.log",
    benchmark:
        "results/benchmarks/heads_variant_{variant}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=lambda wc: 1200 + 300 * len(HEADS_VARIANTS[wc.variant]["seeds"]),
        # as heads_train: 30 s per epoch per seed at N = 50,000 on 2 CPU cores, plus start-up
        runtime=lambda wc: 10 + (_variant_train_params(HEADS, wc.variant)["epochs"] * len(HEADS_VARIANTS[wc.variant]["seeds"])
                                 * HEADS["n_prompts"] // 50000 + 1) // 2,
    shell:
        "{PY} -m algo_emu heads train {params.job} --threads {threads} > {log} 2>&1"


rule heads_variants_table:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        expand("results/heads/variants/{variant}", variant=list(HEADS_VARIANTS)),
    output:
        tables=HEADS_VARIANTS_TABLES,
        curves=HEADS_VARIANTS_CURVES,
    params:
        # baseline_roots: the protocol's own runs, drawn beside when present (not inputs: the variants never train
        # the sweep)
        job=lambda wc: step_job(
            params=step_cfg("heads", "variants"),
            variant_dirs=expand("results/heads/variants/{variant}", variant=list(HEADS_VARIANTS)),
            baseline_roots=["results/heads", "results/reference/paper-scale/heads"], table=HEADS_VARIANTS_TABLES[0],
            curves_csv=HEADS_VARIANTS_CURVES),
    log:
        "logs/heads/variants_table.log",
    shell:
        "{PY} -m algo_emu heads variants-table {params.job} > {log} 2>&1"


rule heads_variants_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/heads_variants.csv",
        curves=HEADS_VARIANTS_CURVES,
    output:
        HEADS_VARIANTS_FIGURES,
    params:
        job=lambda wc: step_job(table="results/tables/heads_variants.csv", curves_csv=HEADS_VARIANTS_CURVES,
                                out=os.path.splitext(HEADS_VARIANTS_FIGURES[0])[0]),
    log:
        "logs/heads/variants_figure.log",
    shell:
        "{PY} -m algo_emu heads variants-figure {params.job} > {log} 2>&1"


rule heads_variants:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        HEADS_VARIANTS_TABLES,
        HEADS_VARIANTS_CURVES,
        HEADS_VARIANTS_FIGURES,


rule heads_aggregate:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        heads_metrics,
    output:
        runs=report("results/tables/heads_runs.csv", caption="../report/heads_tables.rst", category="E1 heads",
                    subcategory="tables", labels={"name": "heads_runs.csv (per seed)"}),
        tables=[report(t, caption="../report/heads_tables.rst", category="E1 heads", subcategory="tables",
                       labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in HEADS_TABLES[:-1]],
    params:
        job=lambda wc: step_job(
            params=step_cfg("heads", "aggregate"), metrics=heads_metrics(), runs_csv="results/tables/heads_runs.csv",
            heads_csv=HEADS_TABLES[0], p_csv=HEADS_TABLES[3]),
    log:
        "logs/heads/aggregate.log",
    shell:
        "{PY} -m algo_emu heads aggregate {params.job} > {log} 2>&1"


rule heads_fit:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        runs="results/tables/heads_runs.csv",
    output:
        report("results/tables/heads_fit.json", caption="../report/heads_tables.rst", category="E1 heads",
               subcategory="tables", labels={"name": "heads_fit.json"}),
    params:
        job=lambda wc: step_job(params=step_cfg("heads", "fit"), runs_csv="results/tables/heads_runs.csv",
                                out_json="results/tables/heads_fit.json"),
    log:
        "logs/heads/fit.log",
    shell:
        "{PY} -m algo_emu heads fit {params.job} > {log} 2>&1"


rule heads_vs_mse_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/heads_vs_mse.csv",
        fit="results/tables/heads_fit.json",
        runs="results/tables/heads_runs.csv",
    output:
        [report(f, caption="../report/heads_vs_mse.rst", category="E1 heads", subcategory="figures",
                labels={"name": "heads_vs_mse.png"}) if f.endswith(".png") else f for f in HEADS_FIGURES],
    params:
        job=lambda wc: step_job(kind="heads", table="results/tables/heads_vs_mse.csv",
                                fit_json="results/tables/heads_fit.json", runs_csv="results/tables/heads_runs.csv",
                                out=os.path.splitext(HEADS_FIGURES[0])[0]),
    log:
        "logs/heads/figure_heads.log",
    shell:
        "{PY} -m algo_emu heads figure {params.job} > {log} 2>&1"


rule prompt_length_vs_mse_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/prompt_length_vs_mse.csv",
        runs="results/tables/heads_runs.csv",
    output:
        [report(f, caption="../report/prompt_length_vs_mse.rst", category="E1 heads", subcategory="figures",
                labels={"name": "prompt_length_vs_mse.png"}) if f.endswith(".png") else f for f in P_FIGURES],
    params:
        job=lambda wc: step_job(kind="prompt_length", table="results/tables/prompt_length_vs_mse.csv",
                                runs_csv="results/tables/heads_runs.csv", out=os.path.splitext(P_FIGURES[0])[0]),
    log:
        "logs/heads/figure_prompt_length.log",
    shell:
        "{PY} -m algo_emu heads figure {params.job} > {log} 2>&1"


wildcard_constraints:
    protocol=r"published|independent",
    variant=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
