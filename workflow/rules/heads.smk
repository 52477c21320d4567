# E1: attention emulating an attention head (the headline result).
# data (per seed) -> train (per setting, all seeds x K/Q/V as one ensemble)
# -> aggregate (tables) -> fit -> figures.
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
        cfg=step_cfg("heads", "data"),
    log:
        "logs/heads/data_seed{seed}.log",
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "{PY} -m algo_emu heads data --params {params.cfg} --seed {wildcards.seed} --out {output.data} > {log} 2>&1"


rule heads_data_published:
    output:
        data="data/heads/published/dataset.pt",
        meta="data/heads/published/dataset.pt.json",
    params:
        cfg=step_cfg("heads", "data"),
    log:
        "logs/heads/data_published.log",
    resources:
        mem_mb=2000,
        runtime=10,
    shell:
        "{PY} -m algo_emu heads data --params {params.cfg} --protocol published --seed 0 --out {output.data} > {log} 2>&1"


if not GROUPED:

    rule heads_train:
        input:
            heads_train_data,
        output:
            expand("results/heads/{{protocol}}/runs/H{{heads}}_p{{p}}/seed{seed}/metrics.json", seed=SEEDS),
            model="results/heads/{protocol}/runs/H{heads}_p{p}/model.pt",  # the frozen model the records were evaluated from
        params:
            cfg=lambda wc: step_cfg("heads", "train", wc.protocol),
            seeds=" ".join(map(str, SEEDS)),
            device=DEVICE,
            out_dir=lambda wc, output: os.path.dirname(os.path.dirname(output[0])),
            checkpoint="results/heads/checkpoints/{protocol}_H{heads}_p{p}.pt",
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
            "{PY} -m algo_emu heads train --params {params.cfg} --protocol {wildcards.protocol} --heads {wildcards.heads} "
            "--p {wildcards.p} --seeds {params.seeds} --data {input} --out-dir {params.out_dir} "
            "--checkpoint {params.checkpoint} --device {params.device} --threads {threads} > {log} 2>&1"

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
                # the independent protocol's keys (heads.target besides the published protocol's) when it is here
                cfg=step_cfg("heads", "train", "independent" if "independent" in _protocols else "published"),
                protocols=" ".join(_protocols),
                heads=_H,
                p=_p,
                seeds=" ".join(map(str, SEEDS)),
                device=DEVICE,
                group=GROUP_ARGS,
                out_root="results/heads",
                checkpoint=f"results/heads/checkpoints/group_H{_H}_p{_p}.pt",
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
                "{PY} -m algo_emu heads train-group --params {params.cfg} --protocols {params.protocols} "
                "--heads {params.heads} --p {params.p} --seeds {params.seeds} --data {input} --out-root {params.out_root} "
                "--checkpoint {params.checkpoint} --device {params.device} --threads {threads} {params.group} > {log} 2>&1"


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
        cfg=lambda wc: as_json(_variant_train_params(HEADS, wc.variant)),
        protocol=lambda wc: _variant_protocol(HEADS_VARIANTS[wc.variant]),
        H=lambda wc: HEADS_VARIANTS[wc.variant]["heads"],
        p=lambda wc: HEADS_VARIANTS[wc.variant]["p"],
        seeds=lambda wc: " ".join(map(str, HEADS_VARIANTS[wc.variant]["seeds"])),
        device=DEVICE,
        checkpoint="results/heads/checkpoints/variants/{variant}.pt",
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
        "{PY} -m algo_emu heads train --params {params.cfg} --protocol {params.protocol} --heads {params.H} "
        "--p {params.p} --seeds {params.seeds} --data {input} --out-dir {output} --checkpoint {params.checkpoint} "
        "--device {params.device} --threads {threads} --variant {wildcards.variant} > {log} 2>&1"


rule heads_variants_table:
    input:
        expand("results/heads/variants/{variant}", variant=list(HEADS_VARIANTS)),
    output:
        tables=HEADS_VARIANTS_TABLES,
        curves=HEADS_VARIANTS_CURVES,
    params:
        cfg=step_cfg("heads", "variants"),
        # the protocol's own runs, drawn beside when present (not inputs: the variants never train the sweep)
        baseline="results/heads results/reference/paper-scale/heads",
    log:
        "logs/heads/variants_table.log",
    shell:
        "{PY} -m algo_emu heads variants-table --params {params.cfg} --variant-dirs {input} "
        "--baseline-roots {params.baseline} --table {output.tables[0]} --curves {output.curves} > {log} 2>&1"


rule heads_variants_figure:
    input:
        table="results/tables/heads_variants.csv",
        curves=HEADS_VARIANTS_CURVES,
    output:
        HEADS_VARIANTS_FIGURES,
    params:
        stem=lambda wc, output: os.path.splitext(output[0])[0],
    log:
        "logs/heads/variants_figure.log",
    shell:
        "{PY} -m algo_emu heads variants-figure --table {input.table} --curves {input.curves} --out {params.stem} "
        "> {log} 2>&1"


rule heads_variants:
    input:
        HEADS_VARIANTS_TABLES,
        HEADS_VARIANTS_CURVES,
        HEADS_VARIANTS_FIGURES,


rule heads_aggregate:
    input:
        heads_metrics,
    output:
        runs=report("results/tables/heads_runs.csv", caption="../report/heads_tables.rst", category="E1 heads",
                    subcategory="tables", labels={"name": "heads_runs.csv (per seed)"}),
        tables=[report(t, caption="../report/heads_tables.rst", category="E1 heads", subcategory="tables",
                       labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in HEADS_TABLES[:-1]],
    params:
        cfg=step_cfg("heads", "aggregate"),
    log:
        "logs/heads/aggregate.log",
    shell:
        "{PY} -m algo_emu heads aggregate --params {params.cfg} --metrics {input} --runs {output.runs} "
        "--heads-table {output.tables[0]} --p-table {output.tables[3]} > {log} 2>&1"


rule heads_fit:
    input:
        runs="results/tables/heads_runs.csv",
    output:
        report("results/tables/heads_fit.json", caption="../report/heads_tables.rst", category="E1 heads",
               subcategory="tables", labels={"name": "heads_fit.json"}),
    params:
        cfg=step_cfg("heads", "fit"),
    log:
        "logs/heads/fit.log",
    shell:
        "{PY} -m algo_emu heads fit --params {params.cfg} --runs {input.runs} --out {output} > {log} 2>&1"


rule heads_vs_mse_figure:
    input:
        table="results/tables/heads_vs_mse.csv",
        fit="results/tables/heads_fit.json",
        runs="results/tables/heads_runs.csv",
    output:
        [report(f, caption="../report/heads_vs_mse.rst", category="E1 heads", subcategory="figures",
                labels={"name": "heads_vs_mse.png"}) if f.endswith(".png") else f for f in HEADS_FIGURES],
    params:
        stem=lambda wc, output: os.path.splitext(output[0])[0],
    log:
        "logs/heads/figure_heads.log",
    shell:
        "{PY} -m algo_emu heads figure --kind heads --table {input.table} --fit {input.fit} --runs {input.runs} "
        "--out {params.stem} > {log} 2>&1"


rule prompt_length_vs_mse_figure:
    input:
        table="results/tables/prompt_length_vs_mse.csv",
        runs="results/tables/heads_runs.csv",
    output:
        [report(f, caption="../report/prompt_length_vs_mse.rst", category="E1 heads", subcategory="figures",
                labels={"name": "prompt_length_vs_mse.png"}) if f.endswith(".png") else f for f in P_FIGURES],
    params:
        stem=lambda wc, output: os.path.splitext(output[0])[0],
    log:
        "logs/heads/figure_prompt_length.log",
    shell:
        "{PY} -m algo_emu heads figure --kind prompt_length --table {input.table} --runs {input.runs} "
        "--out {params.stem} > {log} 2>&1"


wildcard_constraints:
    protocol=r"published|independent",
    variant=r"[A-Za-z0-9][A-Za-z0-9_.-]*",
