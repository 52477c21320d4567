# E4, Ames Housing (Appendix C.2). Data: download once (with provenance), then
# one prepared train/test split per seed (intermediate outputs, requested by the
# fit and training rules). Emulation (below): fits per (mode, seed), one training
# job per mode and one for its weight-blind baseline, read-only evaluation, table, figure.
# The logic is in src/algo_emu/data/ames.py, src/algo_emu/data/ames_fits.py,
# src/algo_emu/data/ames_prompts.py, src/algo_emu/experiments/ames.py and ames_tables.py;
# docs/ames.md explains every step.
import os


def ames_local_source(wildcards):
    """A local CSV source is an input (its changes rerun the download); other sources have none."""
    source = str(config["ames"].get("source", "auto"))
    return [source] if source.lower().endswith(".csv") else []


rule download_ames:
    input:
        ames_local_source,
    output:
        csv="data/raw/ames.csv",
        provenance="data/raw/ames.provenance.json",
    params:
        cfg=step_cfg("ames", "download"),
    log:
        "logs/ames/download.log",
    benchmark:
        "results/benchmarks/ames_download.tsv"
    shell:
        "{PY} -m algo_emu ames download --params {params.cfg}"
        " --out-csv {output.csv} --out-provenance {output.provenance} > {log} 2>&1"


rule ames_prepare:
    input:
        csv="data/raw/ames.csv",
        provenance="data/raw/ames.provenance.json",
    output:
        npz="data/ames/seed{seed}/prepared.npz",
        meta="data/ames/seed{seed}/prepared.json",
    params:
        cfg=step_cfg("ames", "prepare"),
    log:
        "logs/ames/prepare_seed{seed}.log",
    benchmark:
        "results/benchmarks/ames_prepare_seed{seed}.tsv"
    shell:
        "{PY} -m algo_emu ames prepare --params {params.cfg} --csv {input.csv}"
        " --provenance {input.provenance} --seed {wildcards.seed}"
        " --out {output.npz} --out-meta {output.meta} > {log} 2>&1"


# ----------------------------------------------------------------------------
# Emulation: fit the three algorithms per (mode, seed), train one emulator per
# seed (all seeds of a mode in one job) and, in a job of its own, its weight-blind
# baseline, freeze them, evaluate read-only per prompt set with prompt ablations on
# the held-out rows, then the tables (main + ablation) and the figures.
# The logic is in src/algo_emu/data/ames_fits.py (fits), src/algo_emu/experiments/ames.py
# (train, evaluate), ames_tables.py (aggregate) and src/algo_emu/plots/ames.py (figure).
AMES = config["ames"]
AMES_MODES = list(AMES.get("modes", ["corrected", "reference_code"]))
# Each step gets only the keys it reads (algo_emu.experiments.step_keys): reference_code's fits do not read
# the pool keys, so changing one reruns neither reference_code's fits nor its training.
AMES_TABLES = [
    "results/tables/ames.csv",
    "results/tables/ames.md",
    "results/tables/ames.tex",
]
AMES_ABLATION_TABLES = [
    "results/tables/ames_ablation.csv",
    "results/tables/ames_ablation.md",
    "results/tables/ames_ablation.tex",
]
AMES_FIGURES = expand("results/figures/ames.{ext}", ext=["pdf", "png"])
AMES_ABLATION_FIGURES = expand("results/figures/ames_ablation.{ext}", ext=["pdf", "png"])


wildcard_constraints:
    ames_mode="corrected|reference_code",


rule ames_fit:
    input:
        npz="data/ames/seed{seed}/prepared.npz",
        meta="data/ames/seed{seed}/prepared.json",
    output:
        npz="results/ames/{ames_mode}/seed{seed}/fits.npz",
        summary="results/ames/{ames_mode}/seed{seed}/fits.json",
    params:
        cfg=lambda wc: step_cfg("ames", "fit", wc.ames_mode),
    log:
        "logs/ames/fit_{ames_mode}_seed{seed}.log",
    benchmark:
        "results/benchmarks/ames_fit_{ames_mode}_seed{seed}.tsv"
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "{PY} -m algo_emu ames fit --params {params.cfg} --mode {wildcards.ames_mode} --seed {wildcards.seed}"
        " --prepared {input.npz} --out {output.npz} --out-json {output.summary} > {log} 2>&1"


rule ames_train:
    input:
        prepared=expand("data/ames/seed{seed}/prepared.npz", seed=SEEDS),
        fits=expand("results/ames/{{ames_mode}}/seed{seed}/fits.npz", seed=SEEDS),
    output:
        model="results/ames/{ames_mode}/emulator.pt",
        sidecar="results/ames/{ames_mode}/emulator.pt.json",
    params:
        blind="",
        cfg=step_cfg("ames", "train"),
        seeds=" ".join(map(str, SEEDS)),
        device=DEVICE,
        checkpoint_dir="results/ames/{ames_mode}/checkpoints",
    log:
        "logs/ames/train_{ames_mode}.log",
    benchmark:
        "results/benchmarks/ames_train_{ames_mode}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=lambda wc: 2000 + 300 * len(SEEDS),
        runtime=lambda wc: 30 + 4 * AMES["epochs"],
    shell:
        "{PY} -m algo_emu ames train {params.blind}--params {params.cfg} --mode {wildcards.ames_mode}"
        " --seeds {params.seeds} --prepared {input.prepared} --fits {input.fits} --out {output.model}"
        " --checkpoint-dir {params.checkpoint_dir}"
        " --device {params.device} --threads {threads} > {log} 2>&1"


# The weight-blind baseline of each mode: the same job as ames_train (resources, shell) with `--blind`
# (tokens without the weight columns), its own frozen file, log and benchmark; its checkpoints sit beside the
# emulator's, prefixed blind_.
use rule ames_train as ames_train_blind with:
    output:
        model="results/ames/{ames_mode}/blind.pt",
        sidecar="results/ames/{ames_mode}/blind.pt.json",
    params:
        blind="--blind ",
        cfg=step_cfg("ames", "train"),
        seeds=" ".join(map(str, SEEDS)),
        device=DEVICE,
        checkpoint_dir="results/ames/{ames_mode}/checkpoints",
    log:
        "logs/ames/train_blind_{ames_mode}.log",
    benchmark:
        "results/benchmarks/ames_train_blind_{ames_mode}.tsv"


rule ames_evaluate:
    input:
        model="results/ames/{ames_mode}/emulator.pt",
        sidecar="results/ames/{ames_mode}/emulator.pt.json",
        blind="results/ames/{ames_mode}/blind.pt",
        blind_sidecar="results/ames/{ames_mode}/blind.pt.json",
        prepared=expand("data/ames/seed{seed}/prepared.npz", seed=SEEDS),
        fits=expand("results/ames/{{ames_mode}}/seed{seed}/fits.npz", seed=SEEDS),
        summaries=expand("results/ames/{{ames_mode}}/seed{seed}/fits.json", seed=SEEDS),
    output:
        metrics=expand("results/ames/{{ames_mode}}/seed{seed}/metrics.json", seed=SEEDS),
        predictions="results/ames/{ames_mode}/predictions.csv",
    params:
        seeds=" ".join(map(str, SEEDS)),
        device=DEVICE,
        out_dir=lambda wc, output: os.path.dirname(output.predictions),
    log:
        "logs/ames/evaluate_{ames_mode}.log",
    benchmark:
        "results/benchmarks/ames_evaluate_{ames_mode}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=lambda wc: 2000 + 300 * len(SEEDS),
        runtime=30,
    shell:
        "{PY} -m algo_emu ames evaluate --mode {wildcards.ames_mode} --seeds {params.seeds}"
        " --prepared {input.prepared} --fits {input.fits} --emulator {input.model} --blind {input.blind}"
        " --out-dir {params.out_dir} --predictions {output.predictions}"
        " --device {params.device} --threads {threads} > {log} 2>&1"


rule ames_aggregate:
    input:
        expand("results/ames/{mode}/seed{seed}/metrics.json", mode=AMES_MODES, seed=SEEDS),
    output:
        tables=[report(t, caption="../report/ames_tables.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="tables", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in AMES_TABLES],
        runs=report("results/tables/ames_runs.csv", caption="../report/ames_tables.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="tables", labels={"name": "ames_runs.csv (per seed)"}),
        ablation=[report(t, caption="../report/ablation.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="ablations", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in AMES_ABLATION_TABLES],
    params:
        modes=" ".join(AMES_MODES),
    log:
        "logs/ames/aggregate.log",
    shell:
        "{PY} -m algo_emu ames aggregate --modes {params.modes} --metrics {input}"
        " --table {output.tables[0]} --runs {output.runs}"
        " --ablation-table {output.ablation[0]} > {log} 2>&1"


rule ames_figure:
    input:
        table="results/tables/ames.csv",
        runs="results/tables/ames_runs.csv",
        predictions=expand("results/ames/{mode}/predictions.csv", mode=AMES_MODES),
        ablation="results/tables/ames_ablation.csv",
    output:
        figures=[report(f, caption="../report/ames.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="figures", labels={"name": "ames.png"}) if f.endswith(".png") else f for f in AMES_FIGURES],
        ablation=[report(f, caption="../report/ablation.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="ablations", labels={"name": "ames_ablation.png"}) if f.endswith(".png") else f for f in AMES_ABLATION_FIGURES],
    params:
        stem=lambda wc, output: os.path.splitext(output.figures[0])[0],
        ablation_stem=lambda wc, output: os.path.splitext(output.ablation[0])[0],
    log:
        "logs/ames/figure.log",
    shell:
        "{PY} -m algo_emu ames figure --table {input.table} --runs {input.runs}"
        " --predictions {input.predictions} --out {params.stem}"
        " --ablation-table {input.ablation} --ablation-out {params.ablation_stem} > {log} 2>&1"

