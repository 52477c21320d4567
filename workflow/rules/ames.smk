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
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        ames_local_source,
    output:
        csv="data/raw/ames.csv",
        provenance="data/raw/ames.provenance.json",
    params:
        job=lambda wc: step_job(
            params=step_cfg("ames", "download"), out_csv="data/raw/ames.csv",
            out_provenance="data/raw/ames.provenance.json"),
    log:
        "logs/ames/download.log",
    benchmark:
        "results/benchmarks/ames_download.tsv"
    shell:
        "{PY} -m algo_emu ames download {params.job} > {log} 2>&1"


rule ames_prepare:
    input:
        csv="data/raw/ames.csv",
        provenance="data/raw/ames.provenance.json",
    output:
        npz="data/ames/seed{seed}/prepared.npz",
        meta="data/ames/seed{seed}/prepared.json",
    params:
        job=lambda wc: step_job(
            params=step_cfg("ames", "prepare"), csv_path="data/raw/ames.csv",
            provenance_path="data/raw/ames.provenance.json", seed=int(wc.seed),
            out_npz=f"data/ames/seed{wc.seed}/prepared.npz", out_meta=f"data/ames/seed{wc.seed}/prepared.json"),
    log:
        "logs/ames/prepare_seed{seed}.log",
    benchmark:
        "results/benchmarks/ames_prepare_seed{seed}.tsv"
    shell:
        "{PY} -m algo_emu ames prepare {params.job} > {log} 2>&1"


# ----------------------------------------------------------------------------
# Emulation: fit the three algorithms per (mode, seed), train one emulator per
# seed (all seeds of a mode in one job) and, in a job of its own, its weight-blind
# baseline, freeze them, evaluate read-only per prompt set with prompt ablations on
# the held-out rows, then the tables (main + ablation) and the figures.
# The logic is in src/algo_emu/data/ames_fits.py (fits), src/algo_emu/experiments/ames.py
# (train, evaluate), ames_tables.py (aggregate) and src/algo_emu/plots/ames.py (figure).
AMES = config["ames"]
AMES_MODES = list(AMES.get("modes", ["corrected", "reference_code"]))
# Each step gets only the keys it reads (algo_emu.specs): reference_code's fits do not read
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
# The paths the rules read and their jobs name (a job is built from the wildcards alone: Snakemake leaves a
# params function that takes `input` or `output` out of the rerun trigger).
AMES_PREPARED = expand("data/ames/seed{seed}/prepared.npz", seed=SEEDS)
AMES_METRICS = expand("results/ames/{mode}/seed{seed}/metrics.json", mode=AMES_MODES, seed=SEEDS)
AMES_PREDICTIONS = expand("results/ames/{mode}/predictions.csv", mode=AMES_MODES)


def ames_fits(mode, ext="npz"):
    """Every seed's fits of the mode (`npz`: the fitted coefficients, `json`: their summary), in SEEDS order."""
    return [f"results/ames/{mode}/seed{s}/fits.{ext}" for s in SEEDS]


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
        job=lambda wc: step_job(
            params=step_cfg("ames", "fit", wc.ames_mode), mode=wc.ames_mode, seed=int(wc.seed),
            prepared_npz=f"data/ames/seed{wc.seed}/prepared.npz",
            out_npz=f"results/ames/{wc.ames_mode}/seed{wc.seed}/fits.npz",
            out_json=f"results/ames/{wc.ames_mode}/seed{wc.seed}/fits.json"),
    log:
        "logs/ames/fit_{ames_mode}_seed{seed}.log",
    benchmark:
        "results/benchmarks/ames_fit_{ames_mode}_seed{seed}.tsv"
    resources:
        mem_mb=2000,
        runtime=20,
    shell:
        "{PY} -m algo_emu ames fit {params.job} > {log} 2>&1"


rule ames_train:
    input:
        prepared=AMES_PREPARED,
        fits=lambda wc: ames_fits(wc.ames_mode),
    output:
        model="results/ames/{ames_mode}/emulator.pt",
        sidecar="results/ames/{ames_mode}/emulator.pt.json",
    params:
        job=lambda wc: step_job(
            params=step_cfg("ames", "train"), mode=wc.ames_mode, seeds=SEEDS, prepared_paths=AMES_PREPARED,
            fits_paths=ames_fits(wc.ames_mode), out=f"results/ames/{wc.ames_mode}/emulator.pt", device_spec=DEVICE,
            checkpoint_dir=f"results/ames/{wc.ames_mode}/checkpoints"),
    log:
        "logs/ames/train_{ames_mode}.log",
    benchmark:
        "results/benchmarks/ames_train_{ames_mode}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=lambda wc: 2000 + 300 * len(SEEDS),
        runtime=lambda wc: 30 + 4 * AMES["epochs"],
    shell:
        "{PY} -m algo_emu ames train {params.job} --threads {threads} > {log} 2>&1"


# The weight-blind baseline of each mode: the same job as ames_train (resources, shell) with `blind`
# (tokens without the weight columns), its own frozen file, log and benchmark; its checkpoints sit beside the
# emulator's, prefixed blind_.
use rule ames_train as ames_train_blind with:
    output:
        model="results/ames/{ames_mode}/blind.pt",
        sidecar="results/ames/{ames_mode}/blind.pt.json",
    params:
        job=lambda wc: step_job(
            params=step_cfg("ames", "train"), mode=wc.ames_mode, seeds=SEEDS, prepared_paths=AMES_PREPARED,
            fits_paths=ames_fits(wc.ames_mode), out=f"results/ames/{wc.ames_mode}/blind.pt", device_spec=DEVICE,
            blind=True, checkpoint_dir=f"results/ames/{wc.ames_mode}/checkpoints"),
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
        prepared=AMES_PREPARED,
        fits=lambda wc: ames_fits(wc.ames_mode),
        summaries=lambda wc: ames_fits(wc.ames_mode, "json"),
    output:
        metrics=expand("results/ames/{{ames_mode}}/seed{seed}/metrics.json", seed=SEEDS),
        predictions="results/ames/{ames_mode}/predictions.csv",
    params:
        job=lambda wc: step_job(
            mode=wc.ames_mode, seeds=SEEDS, prepared_paths=AMES_PREPARED, fits_paths=ames_fits(wc.ames_mode),
            emulator=f"results/ames/{wc.ames_mode}/emulator.pt", blind=f"results/ames/{wc.ames_mode}/blind.pt",
            out_dir=f"results/ames/{wc.ames_mode}", predictions_csv=f"results/ames/{wc.ames_mode}/predictions.csv",
            device_spec=DEVICE),
    log:
        "logs/ames/evaluate_{ames_mode}.log",
    benchmark:
        "results/benchmarks/ames_evaluate_{ames_mode}.tsv"
    threads: config["threads"]
    resources:
        mem_mb=lambda wc: 2000 + 300 * len(SEEDS),
        runtime=30,
    shell:
        "{PY} -m algo_emu ames evaluate {params.job} --threads {threads} > {log} 2>&1"


rule ames_aggregate:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        AMES_METRICS,
    output:
        tables=[report(t, caption="../report/ames_tables.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="tables", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in AMES_TABLES],
        runs=report("results/tables/ames_runs.csv", caption="../report/ames_tables.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="tables", labels={"name": "ames_runs.csv (per seed)"}),
        ablation=[report(t, caption="../report/ablation.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="ablations", labels={"name": t.rsplit("/", 1)[-1]}) if t.endswith(".csv") else t for t in AMES_ABLATION_TABLES],
    params:
        job=lambda wc: step_job(
            modes=AMES_MODES, metrics_paths=AMES_METRICS, table_csv=AMES_TABLES[0],
            runs_csv="results/tables/ames_runs.csv", ablation_csv=AMES_ABLATION_TABLES[0]),
    log:
        "logs/ames/aggregate.log",
    shell:
        "{PY} -m algo_emu ames aggregate {params.job} > {log} 2>&1"


rule ames_figure:
    localrule: True  # runs where Snakemake runs, never submitted to a cluster
    input:
        table="results/tables/ames.csv",
        runs="results/tables/ames_runs.csv",
        predictions=AMES_PREDICTIONS,
        ablation="results/tables/ames_ablation.csv",
    output:
        figures=[report(f, caption="../report/ames.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="figures", labels={"name": "ames.png"}) if f.endswith(".png") else f for f in AMES_FIGURES],
        ablation=[report(f, caption="../report/ablation.rst", category="E4 Ames Housing (Appendix C.2)", subcategory="ablations", labels={"name": "ames_ablation.png"}) if f.endswith(".png") else f for f in AMES_ABLATION_FIGURES],
    params:
        job=lambda wc: step_job(
            table="results/tables/ames.csv", runs_csv="results/tables/ames_runs.csv",
            predictions=AMES_PREDICTIONS, out=os.path.splitext(AMES_FIGURES[0])[0],
            ablation_table="results/tables/ames_ablation.csv",
            ablation_out=os.path.splitext(AMES_ABLATION_FIGURES[0])[0]),
    log:
        "logs/ames/figure.log",
    shell:
        "{PY} -m algo_emu ames figure {params.job} > {log} 2>&1"

