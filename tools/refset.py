"""Committed reference sets: collect a finished run's small outputs, learning curves, and a Markdown report.

Tooling for the sets committed under ``results/reference/`` (not part of the installed package; it reads the
package's records and tables).

A reference set is a finished ``snakemake all`` run (for example ``--configfile config/reference.yaml``)
whose small outputs are committed under ``results/reference/<name>/`` so that a reviewer can read the
evidence on the repository without running anything:

    python -m tools.refset collect --results runs/reference/results --dir results/reference/reference-scale
    python -m tools.refset build --dir results/reference/reference-scale --config config/reference.yaml

``collect`` copies tables, figures, replication report, manifest, Snakemake benchmarks and every per-seed
JSON record, never model files, checkpoints or arrays (a file type not on the list is refused, not
silently copied). ``build`` reads only the collected copy: it draws the learning curves (training loss of
each model beside its weight-blind baseline, E1's held-out MSE) into ``figures/learning_curves.png``,
writes them tidy to ``tables/learning_curves.csv``, and writes ``README.md``: the scale, the code,
whether each experiment's models learned (with the numbers), and the verdict table of
``replication.md``. Each experiment's learning curves are read through its ``RunSpec`` (``records``,
``curves``), so a new experiment declares them there; that import brings torch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from algo_emu import tables
from tools.commands import Step, arg, steps_parser
from algo_emu.config import SECTIONS
from algo_emu.io import read_json, write_text

# What a reference set keeps: small, text or image, reproducible from the records.
KEEP_SUFFIXES = (".json", ".csv", ".md", ".tex", ".tsv", ".png", ".pdf")
# Never committed: weights, checkpoints, arrays, the HTML report (it embeds every figure again).
SKIP_SUFFIXES = (".pt", ".npz", ".npy", ".ckpt", ".html", ".log")
SKIP_DIRS = ("checkpoints", "reference")
# Per-experiment record directories under results/ (E1-E4 are trained; E5/E6 records are small JSON too).
RECORD_DIRS = SECTIONS  # results/<section>/ of each experiment (algo_emu.specs)


class RefsetError(ValueError):
    """A reference set that cannot be collected or built; the message names the file."""


def _selected(root: Path) -> list[Path]:
    """Relative paths under ``root`` that a reference set keeps."""
    keep: list[Path] = []
    top = ["tables", "figures", "benchmarks", *RECORD_DIRS]
    for name in ("replication.md", "manifest.json"):
        if (root / name).is_file():
            keep.append(Path(name))
    for sub in top:
        base = root / sub
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or any(part in SKIP_DIRS for part in rel.parts[:-1]):
                continue
            if path.name.endswith(SKIP_SUFFIXES):
                continue
            if not path.name.endswith(KEEP_SUFFIXES):
                raise RefsetError(f"{path}: file type not known to a reference set (keep: {', '.join(KEEP_SUFFIXES)}; "
                                  f"skip: {', '.join(SKIP_SUFFIXES)}); add it to one list in tools/refset.py")
            keep.append(rel)
    return keep


def collect(results: str | os.PathLike, dest: str | os.PathLike) -> list[Path]:
    """Copy a finished run's small outputs from ``results`` to ``dest`` (replacing what was there).

    Refuses a run without ``replication.md`` and ``manifest.json``: those exist only after ``all`` finished,
    so a half-finished run is never committed as a reference set. Copies into a temporary sibling and
    renames, so ``dest`` is either the old set or the whole new one.
    """
    root = Path(results)
    missing = [n for n in ("replication.md", "manifest.json", "tables/replication.csv") if not (root / n).is_file()]
    if missing:
        raise RefsetError(f"{root}: not a finished run (missing {', '.join(missing)}); run `all` to the end first")
    files = _selected(root)
    dest = Path(dest)
    tmp = dest.with_name(f".{dest.name}.tmp{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    for rel in files:
        (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / rel, tmp / rel)
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old{os.getpid()}")
        dest.rename(old)
        tmp.rename(dest)
        shutil.rmtree(old)
    else:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp.rename(dest)
    return files


# ---------------------------------------------------------------------------------------------------------
# Learning curves: one tidy frame from the per-seed records
# ---------------------------------------------------------------------------------------------------------

CURVE_COLUMNS = tables.CURVE_COLUMNS


def curve_specs() -> list[tuple[str, "tables.RunSpec"]]:
    """(label, RunSpec) of every trained experiment's records that hold learning curves, in the report's order, as
    each experiment's spec declares them (``runs``): where each record sits and what curves it holds are declared
    there (``records``, ``curves``), not here. Imports the experiment modules (and so torch)."""
    from algo_emu.specs import run_specs

    return [(label, spec) for label, spec in run_specs() if spec.curves is not None]


def learning_curves(ref_dir: str | os.PathLike) -> pd.DataFrame:
    """Every recorded per-epoch value of E1-E4 in ``ref_dir`` as one tidy frame (CURVE_COLUMNS)."""
    rows = [row for label, spec in curve_specs() for row in tables.load_curves(ref_dir, spec, label)]
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def flattening(curves: pd.DataFrame) -> pd.DataFrame:
    """Per (experiment, setting, model, quantity): the seed-mean curve's last value, its value at 80 % of the
    epochs, and the relative drop over that last fifth (``late_drop``; near 0 = flattened)."""
    out = []
    mean = curves.groupby(["experiment", "setting", "model", "quantity", "epoch"], sort=False)["value"].mean()
    for key, s in mean.groupby(level=[0, 1, 2, 3], sort=False):
        s = s.droplevel([0, 1, 2, 3]).sort_index()
        last_epoch = int(s.index.max())
        at = s[s.index <= max(1, int(round(0.8 * last_epoch)))]
        ref = float(at.iloc[-1]) if len(at) else float(s.iloc[0])
        last = float(s.iloc[-1])
        out.append(dict(zip(["experiment", "setting", "model", "quantity"], key), epochs=last_epoch,
                        first=float(s.iloc[0]), at_80pct=ref, last=last, min=float(s.min()),
                        late_drop=(ref - last) / ref if ref else np.nan))
    return pd.DataFrame(out)


def curves_figure(curves: pd.DataFrame, stem: str | os.PathLike) -> None:
    """One panel per experiment: seed-mean curves, model solid, weight-blind baseline dashed (log scale)."""
    import seaborn as sns  # noqa: F401  (sets the project's style through algo_emu.plots)

    from algo_emu.plots import PALETTE, figure, save_figure

    exps = [e for e in ("E1", "E2", "E3", "E4") if (curves.experiment == e).any()]
    if not exps:
        raise RefsetError("no learning curves in the reference set (no E1-E4 records)")
    titles = {"E1": "E1 heads: held-out MSE", "E2": "E2 f(w^T x - y) x: train loss",
              "E3": "E3 statistical: train loss", "E4": "E4 Ames: train loss"}
    with figure(ncols=len(exps), width=3.8) as (fig, axes):
        axes = np.atleast_2d(axes)
        for ax, exp in zip(axes[0], exps):
            c = curves[curves.experiment == exp]
            title = titles[exp]
            if exp == "E1":
                c = c[c.quantity.str.startswith("test MSE")]
            if exp == "E2" and not c.empty:  # 4 f x every p is unreadable: the longest prompt only
                p_max = c.setting.str.extract(r"p=(\d+)")[0].astype(int).max()
                c = c[c.setting.str.endswith(f" p={p_max}")]
                title += f" (p = {p_max})"
            settings = list(dict.fromkeys(c.setting))
            colors = dict(zip(settings, sns.color_palette(PALETTE, max(len(settings), 3))))
            for (setting, model), g in c.groupby(["setting", "model"], sort=False):
                m = g.groupby("epoch")["value"].mean()
                ax.plot(m.index, m.values, "-" if model == "model" else "--", color=colors[setting], lw=1.2,
                        marker="o" if len(m) <= 5 else None, ms=3,
                        label=f"{setting}{'' if model == 'model' else ' (blind)'}")
            ax.set_yscale("log")
            ax.set_xlabel("epoch")
            ax.set_title(title, fontsize=9)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=5, ncol=1 if len(settings) < 7 else 2)
            else:
                ax.text(0.5, 0.5, "no values recorded\n(eval_every = 0)", ha="center", va="center", transform=ax.transAxes)
        axes[0][0].set_ylabel("mean over seeds")
        save_figure(fig, str(stem), footer="solid: the emulator; dashed: its weight-blind baseline (same block, data, "
                                           "budget; no weights in its input). Source: per-seed metrics.json records.")


# ---------------------------------------------------------------------------------------------------------
# README.md of a reference set
# ---------------------------------------------------------------------------------------------------------

def _learned_lines(d: Path) -> list[str]:
    """Per experiment, the numbers that say whether its models learned (read from the collected tables)."""
    t = d / "tables"
    lines: list[str] = []

    def read(name: str) -> pd.DataFrame | None:
        return pd.read_csv(t / name) if (t / name).is_file() else None

    ps = read("prompt_length_vs_mse.csv")
    if ps is not None:
        for _, r in ps.iterrows():
            if r.get("target") == "reference_code" or "target" not in ps:
                lines.append(f"- E1 p sweep, p = {r['p']}, H = {r['heads']}: MSE {r['mse_mean']:.3g} vs Var(Y) "
                             f"{r['target_var_mean']:.3g} (ratio {r['mse_mean'] / r['target_var_mean']:.3g})")
    f = read("f_emulation.csv")
    if f is not None:
        for _, r in f.iterrows():
            lines.append(f"- E2 f = {r['f']}, p = {r['p']}: MSE / Var(target) {r['rel_mse_mean']:.3g}, weight-blind "
                         f"baseline {r['blind_rel_mse_mean']:.3g}, model / baseline {r['mse_over_blind']:.3g}")
    s = read("statistical_emulation.csv")
    if s is not None:
        for _, r in s.iterrows():
            lines.append(f"- E3 {r['mode']} {r['algorithm']}, H = {r['heads']}: MSE {r['mse_mean']:.3g}, model / "
                         f"weight-blind baseline {r['mse_over_blind']:.3g}")
    a, ab = read("ames.csv"), read("ames_ablation.csv")
    if a is not None and ab is not None:
        none = ab[ab.ablation == "none"].set_index(["mode", "algorithm"])
        for _, r in a.iterrows():
            key = (r["mode"], r["algorithm"])
            own = (f"MSE against its training target {none.loc[key, 'mse_mean']:.3g}, model / weight-blind "
                   f"{none.loc[key, 'mse_over_blind']:.3g}; ") if key in none.index else ""
            lines.append(f"- E4 {r['mode']} {r['algorithm']}: {own}emulation MSE (against the algorithm's prediction) "
                         f"{r['emulation_mse_mean']:.3g}, spread between the algorithms' predictions "
                         f"{r['spread_mse_mean']:.3g}, Var(target) {r['target_var_mean']:.3g}")
    return lines


def build(ref_dir: str | os.PathLike, config_path: str | os.PathLike, title: str) -> Path:
    """Learning curves (figure + table) and README.md of a collected reference set; returns the README path."""
    d = Path(ref_dir)
    for need in ("replication.md", "manifest.json", "tables/replication.csv"):
        if not (d / need).is_file():
            raise RefsetError(f"{d / need}: missing; run `python -m tools.refset collect` on a finished run first")
    curves = learning_curves(d)
    (d / "tables").mkdir(exist_ok=True)
    (d / "figures").mkdir(exist_ok=True)
    from algo_emu.io import write_csv

    write_csv(d / "tables" / "learning_curves.csv", curves)
    flat = flattening(curves)
    write_csv(d / "tables" / "learning_curves_summary.csv", flat)
    curves_figure(curves, d / "figures" / "learning_curves")
    manifest = read_json(d / "manifest.json")
    rep = pd.read_csv(d / "tables" / "replication.csv")
    rel = lambda p: os.path.relpath(p, d)  # noqa: E731
    lines = [f"# {title}", "",
             f"Made by `snakemake all --configfile {config_path}` (one run, this project's 2-core CPU unless the manifest "
             f"says otherwise), collected and summarised with `python -m tools.refset collect --results RUN/results --dir {d}` "
             f"and `python -m tools.refset build --dir {d} --config {config_path}`. Nothing here needs to be run to be read.",
             ""]
    git, device = manifest.get("git", {}), manifest.get("device", {})
    jobs = manifest.get("benchmarks", {}).get("jobs", {})
    wall = sum(float(j.get("wall_s", 0)) for j in jobs.values())
    lines += ["## Provenance", "",
              f"- commit `{git.get('commit')}` (dirty: {git.get('dirty')}), config hash `{manifest.get('config_hash')}`, "
              f"made {manifest.get('created')}",
              f"- device: {device.get('config_device')} ({device.get('cpu_count')} CPU cores; CUDA: {device.get('cuda')}); "
              f"versions: " + ", ".join(f"{k} {v}" for k, v in sorted(manifest.get("versions", {}).items())
                                        if k in ("torch", "python", "snakemake", "numpy", "pandas")),
              f"- {len(jobs)} timed jobs, {wall / 60:.1f} min of summed job wall time (jobs ran one or two at a time "
              f"beside other work; per job: `manifest.json` -> benchmarks)"]
    lines += ["- per-job wall times: `benchmarks/*.tsv` (Snakemake benchmark files); per-seed records: "
              "`<experiment>/**/metrics.json`", ""]
    lines += ["## Did the models learn?", "",
              "A model learned when its held-out error is well below what a predictor that ignores the prompt scores "
              "(its weight-blind baseline, or Var(target) for E1). The numbers (mean over seeds):", ""]
    lines += _learned_lines(d) + [""]
    lines += ["Learning curves (seed means; solid: emulator, dashed: weight-blind baseline): "
              "[figures/learning_curves.png](figures/learning_curves.png); how flat each curve is at the end "
              "(`late_drop`: relative fall over the last fifth of the epochs):", "",
              "| experiment | setting | model | quantity | epochs | first | last | late_drop |",
              "|---|---|---|---|---|---|---|---|"]
    for _, r in flat.iterrows():
        lines.append(f"| {r.experiment} | {r.setting} | {r.model} | {r.quantity} | {r.epochs} | {r['first']:.4g} | "
                     f"{r['last']:.4g} | {r.late_drop:.3f} |")
    lines += ["", "![learning curves](figures/learning_curves.png)", ""]
    lines += ["## Verdicts (from replication.md)", "",
              f"The full report with its rules: [replication.md]({rel(d / 'replication.md')}). Per row: learned, verdict.", "",
              "| experiment | claim | setting | learned | verdict |", "|---|---|---|---|---|"]
    for _, r in rep[rep.experiment.isin(["E1", "E2", "E3", "E4", "E5"])].iterrows():
        def cell(v):
            return "" if pd.isna(v) else str(v).replace("|", "/")
        lines.append(f"| {r.experiment} | {cell(r.claim)} | {cell(r.setting)} | {cell(r.learned)} | {cell(r.verdict)} |")
    figs = sorted(p for p in (d / "figures").glob("*.png"))
    lines += ["", "## Figures", ""] + [f"- [{p.stem}]({rel(p)})" for p in figs]
    out = d / "README.md"
    write_text(out, "\n".join(lines) + "\n")
    from algo_emu.report.manifest import seal

    # every file of the set listed in its manifest, the files rebuilt since the run named (manifest verify)
    seal(d, note=f"refset build: README and learning curves from the set's records and tables ({config_path})")
    return out


def e1_tables(ref_dir: str | Path, config_path: str | Path, metrics: list[str] | None = None) -> dict:
    """E1's tables, fit and figures of a committed set (``<ref_dir>/heads/<protocol>/runs/``) from whatever settings
    are there, and the replication report's E1 rows, a setting of the configured sweep that is absent named missing.
    ``metrics``: only these records (a campaign passes the settings its pinned commit made or adopted; the others
    count as missing). Returns the rows, the settings present and missing, and what the page reads."""
    from algo_emu.config import load_config
    from algo_emu.experiments.heads import aggregate, fit, load_runs  # imports torch
    from algo_emu.experiments import heads_tables
    from algo_emu.experiments.heads_settings import settings

    ref = Path(ref_dir)
    config = load_config(config_path)
    params = dict(config["heads"])
    if metrics is None:
        metrics = sorted(str(m) for m in ref.glob("heads/*/runs/H*_p*/seed*/metrics.json"))
    metrics = sorted(str(m) for m in metrics)
    if not metrics:
        raise ValueError(f"{ref}: no per-seed records under heads/<protocol>/runs/")
    runs = load_runs(metrics)
    params["protocols"] = [pr for pr in params["protocols"] if pr in set(runs.protocol)]
    tables, figures = ref / "tables", ref / "figures"
    info = aggregate(params, metrics, str(tables / "heads_runs.csv"), str(tables / "heads_vs_mse.csv"),
                     str(tables / "prompt_length_vs_mse.csv"), allow_partial=True)
    fits = fit(params, str(tables / "heads_runs.csv"), str(tables / "heads_fit.json"))
    from algo_emu.plots import heads as ph

    ph.heads_figure(str(tables / "heads_vs_mse.csv"), str(tables / "heads_fit.json"), str(tables / "heads_runs.csv"),
                    str(figures / "heads_vs_mse"))
    ptable = pd.read_csv(tables / "prompt_length_vs_mse.csv")
    if ptable.p.nunique() >= 2:
        ph.prompt_length_figure(str(tables / "prompt_length_vs_mse.csv"), str(tables / "heads_runs.csv"),
                                str(figures / "prompt_length_vs_mse"))
    rows = heads_tables.report_rows(tables, config, f"{Path(config_path).name} (the paper's scale)")
    done_heads = sorted(int(h) for h in runs[runs.p == params["p_heads_sweep"]].heads.unique())
    for r in rows:  # a setting of the configured sweep that is absent here is missing, not "not in the sweep"
        if r.verdict == "not run at this scale" and r.setting.startswith("H="):
            r.verdict = "missing from this reference set"
            r.reason = "in the configured sweep but not yet committed (`make campaign` runs it)"
        if r.claim.startswith("O(1/H): our heads sweep") and done_heads != sorted(params["heads_sweep"]):
            r.verdict = "incomplete: no verdict yet"
            r.reason = (f"fit from H = {done_heads} only (of {sorted(params['heads_sweep'])}); a rate read from a "
                        f"partial sweep is not a result. {r.reason}")
    settings_done = sorted({(r.protocol, int(r.heads), int(r.p)) for r in runs.itertuples()})
    missing = [st for st in settings(params) if st not in settings_done]
    return {"rows": rows, "present": settings_done, "missing": missing, "metrics": metrics, "runs": runs,
            "params": params, "info": info, "fits": fits}


def e1_page(ref_dir: str | Path, config_path: str | Path, title: str, metrics: list[str] | None = None,
            preamble: list[str] | None = None, rebuild: str | None = None) -> dict:
    """Tables, fit, figures (:func:`e1_tables`) and a Markdown report of a committed set's E1 records: the settings
    present and missing, wall times, whether the emulators learned, the paper's numbers beside ours, the fits and
    learning curves. Records of different configurations are reported as MIXED, never silently averaged together.
    ``preamble``: Markdown lines after the title; ``rebuild``: the command that rebuilds the page."""
    from algo_emu.report import replication as rep

    ref = Path(ref_dir)
    e1 = e1_tables(ref, config_path, metrics)
    rows, settings_done, missing, metrics = e1["rows"], e1["present"], e1["missing"], e1["metrics"]
    runs, params, info, fits = e1["runs"], e1["params"], e1["info"], e1["fits"]
    tables, figures = ref / "tables", ref / "figures"
    frame = rep.rows_frame(rows)
    seeds = runs.groupby(["protocol", "heads", "p"]).seed.nunique()
    records = {path: read_json(path) for path in metrics}  # read once: provenance, wall times, learning curves
    first = records[metrics[0]]
    walls = {}
    for m in records.values():
        walls.setdefault((m["protocol"], m["setting"]["heads"], m["setting"]["p"]), m["timing"])
    rebuild = rebuild or f"python -m tools.refset e1-page --dir {ref} --config {config_path}"
    lines = [f"# {title}", "", *(preamble or []),
             "E1 (attention emulating an attention head) at the paper's scale, made on this project's machines and "
             f"committed as per-seed records; rebuild this page with `{rebuild}`.", "",
             f"- config: `{config_path}` heads section, sweep config hash(es) {', '.join(info['config_hashes'])}",
             f"- N = {params['n_prompts']}, n = {params['n_tokens']}, d = {params['d']}, h = {params['hidden']}, "
             f"{params['epochs']} epochs, batch {params['batch_size']}, Adam lr {params['lr']}",
             f"- device: {', '.join(sorted(runs.device.unique()))}; torch {first['environment'].get('torch')}; "
             f"commit(s) {', '.join(sorted({str(m['environment'].get('git_commit')) for m in records.values()}))}",
             f"- settings present ({len(settings_done)}): " + ", ".join(
                 f"{pr} H={h} p={p} ({seeds[(pr, h, p)]} seeds)" for pr, h, p in settings_done),
             f"- settings MISSING ({len(missing)}): " + (", ".join(f"{pr} H={h} p={p}" for pr, h, p in missing) or "none"),
             "", "Wall time per setting (all seeds as one ensemble; 2-core CPU shared with other work unless stated):", ""]
    for (pr, h, p), t in sorted(walls.items()):
        lines.append(f"- {pr} H={h} p={p}: {t.get('wall_seconds_job', float('nan')) / 60:.1f} min "
                     f"({t.get('epochs_run_this_call', '?')} epochs this call, resumed from epoch "
                     f"{t.get('resumed_from_epoch', 0)})")
    table_md = (tables / "heads_vs_mse.md").read_text()
    curves = ["", "## Learning curves", "",
              "Mean over seeds of the composed head's test MSE (the protocol's headline quantity) at the evaluation "
              "epochs (`heads.eval_every`), and of the K/Q/V emulators' mean train loss:", ""]
    for (pr, h, p), _ in sorted(walls.items()):
        recs = [m for path, m in records.items() if f"/{pr}/runs/H{h}_p{p}/" in path]
        by_epoch: dict[int, list[float]] = defaultdict(list)
        loss: dict[int, list[float]] = defaultdict(list)
        for m in recs:
            for entry in m["history"]:
                if "test_mse" in entry:
                    by_epoch[entry["epoch"]].append(entry["test_mse"])
                loss[entry["epoch"]].append(sum(entry["train_loss"].values()) / 3)
        final = float(pd.Series([m["mse"] for m in recs]).mean())
        pts = ", ".join(f"epoch {e}: {sum(v) / len(v):.3g}" for e, v in sorted(by_epoch.items()))  # epochs are 1-based
        ls = ", ".join(f"{e}: {sum(v) / len(v):.3g}" for e, v in sorted(loss.items()) if e % 10 == 0 or e == 1)
        curves.append(f"- {pr} H={h} p={p}: test MSE {pts}; final (epoch {params['epochs']}): {final:.3g}. "
                      f"K/Q/V train loss at epoch {ls}.")
    lines += ["", "## Did the emulators learn?", "",
              "MSE of the composed head against Var(Y), the MSE of a constant predictor (`target_var_mean`):", ""]
    for rec in pd.read_csv(tables / "heads_vs_mse.csv").to_dict("records"):
        lines.append(f"- {rec['protocol']} H={rec['heads']} target={rec['target']}: MSE {rec['mse_mean']:.4g} vs "
                     f"Var(Y) {rec['target_var_mean']:.4g} (ratio {rec['mse_mean'] / rec['target_var_mean']:.3g})")
    lines += ["", "## The paper's numbers beside ours (verdict rules below)", "",
              "\n".join(["", *rep.rows_markdown(frame)]) + "\n", "",
              "## Fits", ""]
    for key in ("published", "independent", "paper"):
        f = fits.get(key)
        if not f:
            continue
        if "a" in f:
            ci = lambda c: f"[{c[0]:.3g}, {c[1]:.3g}]"  # noqa: E731
            part = f" (from H = {f['heads']} only: not a result)" if f.get("heads") and f["heads"] != sorted(
                params["heads_sweep"]) else ""
            lines.append(f"- {key}{part}: MSE(H) = a + b/H with a = {f['a']:.4g} {ci(f['a_ci'])}, b = {f['b']:.4g} "
                         f"{ci(f['b_ci'])}, R^2 = {f['r2']:.3f}; power law alpha = {f['alpha']:.3g} {ci(f['alpha_ci'])}")
        else:
            lines.append(f"- {key}: {f.get('status')}")
    lines += curves
    lines += ["", "## Table", "", table_md, "", "## Figures", "", "![heads vs MSE](figures/heads_vs_mse.png)", ""]
    if (figures / "prompt_length_vs_mse.png").exists():
        lines += ["![prompt length vs MSE](figures/prompt_length_vs_mse.png)", ""]
    lines += ["## Verdict rules", "", rep.rules_markdown()]
    write_text(ref / "README.md", "\n".join(lines) + "\n")
    return {"missing": missing, "present": settings_done, "rows": rows}


# ---------------------------------------------------------------------------------------------------------
# CLI: python -m tools.refset {collect,build,e1-page}
# ---------------------------------------------------------------------------------------------------------

def _collect(results: str, dest: str) -> None:
    print(f"collected {len(collect(results, dest))} files into {dest}")


def _build(ref_dir: str, config_path: str, title: str) -> None:
    print(build(ref_dir, config_path, title))


STEPS = [
    Step("collect", "copy a finished run's small outputs into a reference set", _collect,
         [arg("--results", required=True, help="the run's results/ directory"),
          arg("--dir", "dest", required=True, help="the reference set, e.g. results/reference/reference-scale")]),
    Step("build", "learning curves and README.md of a collected reference set", _build,
         [arg("--dir", "ref_dir", required=True),
          arg("--config", "config_path", required=True, help="the config file the run used (named in the README)"),
          arg("--title", default="Reference scale: committed run")]),
    Step("e1-page", "E1's tables, fit, figures and README.md of a set of committed E1 records (partial sets named)",
         e1_page,
         [arg("--dir", "ref_dir", required=True, help="e.g. results/reference/paper-scale"),
          arg("--config", "config_path", default="config/config.yaml"),
          arg("--title", default="E1 at the paper's scale: committed reference set")]),
]
add_parser = steps_parser(STEPS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.refset", description=__doc__.splitlines()[0])
    add_parser(parser)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
