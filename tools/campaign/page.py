"""The campaign set's page, ``<set>/README.md``: the set's replication report, made by the generator of
``results/replication.md`` (:func:`algo_emu.report.replication.render_markdown`) from the rows of the set's own
tables, then a short provenance section (the pinned commit(s), the CPU each setting was made on, the manifest, what
is missing). Per-call load, stalls, epoch times and notes stay in ``campaign.json`` and ``manifest.json``.

Only settings made at the pinned commit ("done") or shown identical to it by a replay ("adopted") enter the tables;
every other record in the set (another commit, a missing seed) is named and left out, never averaged in. Each
experiment's tables and figures are its own aggregation of its done settings' records (the functions the workflow's
aggregate rules call); a row whose setting is not made yet reads :data:`MISSING` in ``tables/replication.csv`` and is
left off the page, which names the settings still to do instead. E1's records made before the campaign keep their own
page (``pre-campaign/``), E1's diagnostic variants theirs (``variants/``, :mod:`tools.campaign.variants`).
"""

from __future__ import annotations

from pathlib import Path

from algo_emu.io import read_json, write_text
from algo_emu.runtime import REPO_ROOT, cpu_label
from algo_emu.specs import SPECS
from algo_emu.tables import record_commits

STATUS_WORDS = {
    "done": "done at the pinned commit",
    "adopted": "made by another commit, replayed bit for bit at the pinned commit",
    "legacy": "made by another commit, not (yet) shown identical: left out",
    "partial": "some seeds missing: left out",
    "running": "started; resume state committed",
    "todo": "to do",
}
#: Every row of the report, E1's first, missing rows included (what the README's summary counts).
VERDICTS = "tables/replication.csv"
#: A row whose setting the set does not hold yet.
MISSING = "missing from this set"
#: Where the paper's E3 values sit on our training curves (a measurement, not a verdict).
TRAINING_VS_PAPER = "tables/statistical_training.md"
#: Derived files each experiment writes into the set; removed when the experiment has no done setting left, so
#: that no table outlives its records.
DERIVED = {
    "ames": ("tables/ames.*", "tables/ames_runs.*", "tables/ames_ablation.*", "figures/ames.*",
             "figures/ames_ablation.*"),
    "essay": ("figures/essay_icl.*",),
    "statistical": ("tables/statistical_emulation.*", "tables/statistical_runs.*", "tables/statistical_ablation.*",
                    "tables/statistical_ablation_runs.*", "tables/statistical_training.*", "figures/statistical_heads.*",
                    "figures/statistical_training.*"),
    "theorem31": ("tables/f_emulation.*", "tables/f_gd_step.*", "tables/f_emulation_ablation.*",
                  "tables/f_emulation_ablation_runs.*", "tables/theorem31_runs.*", "figures/f_emulation.*"),
}
E1_DERIVED = ("tables/heads_*", "tables/prompt_length_*", "figures/heads_vs_mse.*", "figures/prompt_length_vs_mse.*")


def _records(set_dir: Path, done: list, part: str = "") -> list[str]:
    """The done settings' record paths in the set (``part``: only those whose path holds it)."""
    return [str(set_dir / s.set_path(r)) for s in done for r in s.records if part in r]


def _drop(set_dir: Path, patterns) -> None:
    for pattern in patterns:
        for f in set_dir.glob(pattern):
            f.unlink()


def _fresh(set_dir: Path, experiment: str) -> Path:
    """An experiment's derived files removed before it writes them anew; its tables folder."""
    _drop(set_dir, DERIVED[experiment])
    for sub in ("tables", "figures"):
        (set_dir / sub).mkdir(parents=True, exist_ok=True)
    return set_dir / "tables"


def _partial(rows: list, left: list[str]) -> list:
    """A report's rows from an experiment's done settings only: a row whose setting is not made reads
    :data:`MISSING`; the others say how many of the experiment's settings are not done yet."""
    for r in rows:
        if r.verdict in ("not run at this scale", "not available"):  # tables hold the done settings only
            r.verdict, r.reason = MISSING, "not yet made at the pinned commit (`make campaign` runs it)"
        elif left:
            r.reason = f"{r.reason}; from the settings done only ({len(left)} of this experiment's not done yet)"
    return rows


# ---------------------------------------------------------------------------------------------------------
# Each experiment but E1 from its done settings: its tables and figures, and the report's rows for it
# ---------------------------------------------------------------------------------------------------------

def statistical_rows(set_dir: Path, done: list, cfg: dict, config_name: str, left: list[str]) -> list:
    """E3 from its done (mode, H) settings: ``statistical aggregate``'s tables and figure, where the paper's values sit
    on our training curves (:data:`TRAINING_VS_PAPER`), the report's E3 rows. A (mode, H) is tabled once its H is
    done in every done mode (the table is a full grid)."""
    from algo_emu.experiments import statistical as st
    from algo_emu.experiments import statistical_tables

    t = _fresh(set_dir, "statistical")
    by_mode: dict[str, set[int]] = {}
    for s in done:
        mode, H = s.name.split("/", 1)[1].rsplit("_H", 1)
        by_mode.setdefault(mode, set()).add(int(H))
    heads = sorted(set.intersection(*by_mode.values()))
    tabled = [s for s in done if int(s.name.rsplit("_H", 1)[1]) in heads]
    left = left + [s.name for s in done if s not in tabled]
    params = dict(cfg["statistical"], modes=[m for m in cfg["statistical"]["modes"] if m in by_mode], heads_sweep=heads)
    st.aggregate(params, _records(set_dir, tabled), str(t / "statistical_runs.csv"),
                 str(t / "statistical_emulation.csv"), str(t / "statistical_ablation.csv"),
                 str(t / "statistical_ablation_runs.csv"))
    st.figure(str(t / "statistical_emulation.csv"), str(t / "statistical_runs.csv"),
              str(set_dir / "figures/statistical_heads"))
    lines = training_vs_paper_lines(set_dir, _records(set_dir, tabled))
    if lines:
        write_text(set_dir / TRAINING_VS_PAPER, "\n".join(lines))
    return _partial(statistical_tables.report_rows(t, cfg, config_name), left)


def training_vs_paper_lines(set_dir: Path, metrics: list[str]) -> list[str]:
    """Where the paper's Appendix C.1 values sit on our training curves (the published protocol's H values done),
    with its figure ``figures/statistical_training``; nothing when no such H is done. :func:`statistical_rows` writes
    them to :data:`TRAINING_VS_PAPER`."""
    from tools.campaign.training import PAPER_ALGORITHMS, paper_on_training_curve, training_vs_paper_figure

    info = paper_on_training_curve(metrics)
    if not info:
        return []
    training_vs_paper_figure(info, str(set_dir / "figures/statistical_training"))
    out = ["# E3: the published protocol's MSE against the paper's: where the paper's values sit on our training", "",
           "Measured, not a verdict. Each training prompt draws lasso, ridge or linear uniformly, and the training "
           "loss is the paper's metric (MSE against the noisy y) on that mixture, so the equal-weight mean of the "
           "paper's three values at H is a level of our training loss. The epoch at which our seeds' mean training "
           "loss first reaches it says how far along our training the paper's model sits. An epoch's training loss "
           "is the mean over its batches while the model still improves, so that epoch is at most where the "
           "end-of-epoch model reaches the level.", ""]
    for d in info:
        paper = ", ".join(f"{a} {d['paper'][a]:.4g}" for a in PAPER_ALGORITHMS)
        share = ", ".join(f"{a} {100 * d['share'][a]:.1f} %" for a in PAPER_ALGORITHMS)
        seeds = [c for c in d["seed_cross"] if c is not None]
        reach = (f"our {len(d['seeds'])} seeds' mean training loss reaches it at epoch {d['cross_epoch']} of "
                 f"{d['epochs']} (each seed: epochs {min(seeds)}-{max(seeds)}"
                 + (f"; {len(d['seeds']) - len(seeds)} seed(s) never" if len(seeds) < len(d["seeds"]) else "") + ")"
                 if d["cross_epoch"] else f"our {len(d['seeds'])} seeds' mean training loss never reaches it in "
                 f"{d['epochs']} epochs")
        above = "; ".join(f"{a}: {d['n_at_or_above'][a]} of {len(d['seeds'])} (our largest {d['ours_max'][a]:.3g}, "
                          f"mean {d['ours_mean'][a]:.3g})" for a in PAPER_ALGORITHMS)
        none = [a for a in PAPER_ALGORITHMS if d["n_at_or_above"][a] == 0]
        ratio = {a: d["ours_mean"][a] / d["ours_mean"]["linear"] for a in ("lasso", "ridge")}
        pratio = {a: d["paper"][a] / d["paper"]["linear"] for a in ("lasso", "ridge")}
        out += [f"- H = {d['heads']}: the paper's {paper} average to {d['level']:.3g} (training prompts here: {share}); "
                f"{reach}, and ends at {d['final_train']:.3g}. Held out at the end, our equal-weight mean of the three "
                f"algorithms' test MSE is {d['heldout_mixed']:.3g} ({d['heldout_mixed'] / d['final_train']:.3g}x the "
                f"final training loss).",
                f"  - Seeds whose test MSE is at or above the paper's: {above}."
                + (f" For {' and '.join(none)}, not one seed of ours is as high as the paper's value: the seed-to-seed "
                   "spread of our training does not reach it (the paper's ± is test-set resampling of one model)."
                   if none else ""),
                f"  - The profile across algorithms differs too: relative to linear, the paper's lasso is "
                f"{pratio['lasso']:.2f} and its ridge {pratio['ridge']:.2f}; ours {ratio['lasso']:.2f} and "
                f"{ratio['ridge']:.2f}."]
    out += ["", "Reading: where our mean curve reaches the paper's level well before the end, the paper's numbers are "
            "consistent with a model trained less far (or less well) than ours under the same budget; that is not "
            "shown, since it would take the paper's own model or training log. Whether a less-trained model of ours "
            "also has the paper's profile across algorithms is not tested: no per-epoch evaluation is kept.", "",
            "![E3: our training loss against the paper's level](../figures/statistical_training.png)", ""]
    return out


def theorem31_rows(set_dir: Path, done: list, cfg: dict, config_name: str, left: list[str]) -> list:
    """E2 from its done prompt lengths: ``theorem31 aggregate``'s tables and figure, the report's E2 rows."""
    from algo_emu.experiments import theorem31 as t31
    from algo_emu.experiments import theorem31_tables

    t = _fresh(set_dir, "theorem31")
    params = dict(cfg["theorem31"], p_sweep=sorted(int(s.name.split("/p", 1)[1]) for s in done))
    t31.aggregate(params, _records(set_dir, done, "/runs/"), str(t / "theorem31_runs.csv"),
                  str(t / "f_emulation.csv"), str(t / "f_gd_step.csv"), _records(set_dir, done, "/blind/"),
                  str(t / "f_emulation_ablation.csv"), str(t / "f_emulation_ablation_runs.csv"))
    t31.figure(str(t / "f_emulation.csv"), str(t / "f_gd_step.csv"), str(t / "theorem31_runs.csv"),
               str(set_dir / "figures/f_emulation"))
    return _partial(theorem31_tables.report_rows(t, cfg, config_name), left)


def ames_rows(set_dir: Path, done: list, cfg: dict, config_name: str, left: list[str]) -> list:
    """E4 from its done modes: ``ames aggregate``'s tables, ``ames figure``'s figures (where every done mode's
    predictions are in the set), the report's E4 rows, each naming the modes not done yet."""
    from algo_emu.experiments import ames
    from algo_emu.experiments import ames_tables

    t = _fresh(set_dir, "ames")
    by_mode = {s.name.split("/", 1)[1]: s for s in done}
    modes = [m for m in cfg["ames"]["modes"] if m in by_mode]
    not_done = [m for m in cfg["ames"]["modes"] if m not in by_mode]
    metrics = [str(set_dir / by_mode[m].set_path(r)) for m in modes for r in by_mode[m].records]
    ames.aggregate(modes, metrics, t / "ames.csv", t / "ames_runs.csv", t / "ames_ablation.csv")
    preds = [set_dir / "ames" / m / "predictions.csv" for m in modes]
    if all(p.is_file() for p in preds):
        ames.figure(str(t / "ames.csv"), str(t / "ames_runs.csv"), [str(p) for p in preds],
                    str(set_dir / "figures/ames"), str(t / "ames_ablation.csv"), str(set_dir / "figures/ames_ablation"))
    rows = ames_tables.report_rows(t, cfg, config_name)
    for r in rows:
        if not_done:
            r.reason = f"{r.reason}; from mode(s) {', '.join(modes)} only: {', '.join(not_done)} not done yet"
    return rows


def essay_rows(set_dir: Path, cfg: dict, config_name: str) -> list:
    """E6 from its done setting: the claims table its pinned commit's ``essay claims`` wrote, gated by the
    checkout's replication rules (a trained claim counts only where the main model is within 10 % of the
    Bayes-optimal ridge at the longest context), and its learning curves' figure; no row while a table is missing."""
    import pandas as pd

    from algo_emu.plots import essay as pe
    from algo_emu.experiments import essay_tables

    t = _fresh(set_dir, "essay")
    claims, curves = t / "essay_claims.csv", t / "essay_curves.csv"
    if not all(p.is_file() for p in (claims, curves, t / "essay_equivalences.csv")):
        return []
    pe.plot_icl(pd.read_csv(curves), cfg["essay"], set_dir / "figures/essay_icl")
    return essay_tables.report_rows(t, cfg)


def experiment_rows(set_dir: Path, rows: list, cfg: dict, config_name: str) -> list:
    """The report's rows of every experiment but E1 with a done setting, in the campaign's priority order, each from
    its done settings only (its tables and figures written); an experiment with none keeps no derived file."""
    done: dict[str, list] = {}
    left: dict[str, list[str]] = {}
    for s, st, _ in rows:
        if s.experiment != "heads":
            (done.setdefault(s.experiment, []).append(s) if st in ("done", "adopted")
             else left.setdefault(s.experiment, []).append(s.name))
    for exp in DERIVED:
        if exp not in done:
            _drop(set_dir, DERIVED[exp])
    out: list = []
    for exp, settings_done in done.items():
        if exp == "essay":
            out += essay_rows(set_dir, cfg, config_name)
        else:
            make = {"statistical": statistical_rows, "theorem31": theorem31_rows, "ames": ames_rows}[exp]
            out += make(set_dir, settings_done, cfg, config_name, left.get(exp, []))
    return out


def write_verdicts(set_dir: Path, verdicts: list) -> None:
    """Every row of the report (E1's first), missing ones included: the table the page and the README count."""
    _drop(set_dir, (VERDICTS,))
    if verdicts:
        from algo_emu.io import write_csv
        from algo_emu.report import replication as rep

        write_csv(set_dir / VERDICTS, rep.rows_frame(verdicts))


def _unpin_config_path(readme: Path, wt: Path, config: str) -> None:
    """A page names the config as the repository does, not by the worktree's absolute path."""
    write_text(readme, readme.read_text().replace(str(wt / config), config))


def running_words(resume: Path, root: Path) -> str:
    """A running setting's status, true of the repository: its resume state committed, or (untracked: too large
    to commit) kept on the machine that trains it."""
    import subprocess

    resume, root = Path(resume).resolve(), Path(root).resolve()  # the set's folder may be given relative
    files = [f for f in resume.rglob("*") if f.is_file()]
    tracked = subprocess.run(["git", "ls-files", "--", str(resume)], cwd=root, capture_output=True, text=True).stdout
    if tracked.strip() and all(str(f.relative_to(root)) in tracked.split("\n") for f in files):
        return STATUS_WORDS["running"] + _progress(files)
    mb = sum(f.stat().st_size for f in files) / 2 ** 20
    return (f"started; its resume state ({mb:.0f} MB of checkpoints) is not committed: `make campaign` on the machine "
            "that trains it resumes it, anywhere else the setting starts over" + _progress(files))


def _progress(files: list[Path]) -> str:
    """How far a running setting's checkpoints are: each one's file name and epoch (a job's finished model says
    so); unreadable files (being written, another format) are left out."""
    from tools.campaign import core as cp

    out = []
    for f in sorted(p for p in files if p.suffix == ".pt"):
        got = cp.checkpoint_progress(f)
        if got is not None:
            out.append(f"`{f.name}` at epoch {got[0]}" + (" (finished)" if got[1] else ""))
    return f"; checkpoints: {', '.join(out)}" if out else ""


def built_by(git: dict) -> str:
    """The commit that built a page, as the page names it: ``<commit> with uncommitted changes`` only when tracked
    files outside ``results/`` differ from it. A committed set's own files (its page, tables, a resume state being
    saved) differ while the page is rebuilt; only changes elsewhere mean the page was built by other code."""
    files = git.get("dirty_files")
    code_dirty = git.get("dirty") if files is None else any(not f.startswith("results/") for f in files)
    return (git.get("commit") or "?")[:12] + (" with uncommitted changes" if code_dirty else "")


def setting_cpus(entry: dict) -> str:
    """The CPU(s) a setting was made on: each call's, in order, once each (else the state's one record of it)."""
    labels = []
    for c in entry.get("calls") or [{"hardware": entry.get("hardware")}]:
        label = cpu_label(c.get("hardware")) if c.get("hardware") else "not recorded"
        if label not in labels:
            labels.append(label)
    return ", then ".join(labels)


def provenance(set_dir: Path, state: dict, rows: list, page_commit: str, root: Path, n_missing_rows: int) -> list[str]:
    """The page's last section: how the set was made, by which commits, on which CPU each setting, what is still
    missing (with its predicted hours), which records are kept apart, where the tables and figures are."""
    from tools.campaign import core as cp

    done = [(s, e) for s, st, e in rows if st in ("done", "adopted")]
    commits = [m["to"][:12] for m in state["moves"]]
    out = ["## Provenance", "",
           f"- made setting by setting by `make campaign` ([`tools/campaign`](../../../tools/campaign/core.py)): each "
           "setting's per-seed records by the pinned commit's own Snakemake rules, one setting per job, resumed across "
           f"interruptions; this page, the tables and figures rebuilt from those records by commit `{page_commit}` "
           "(`python -m tools.campaign page`)",
           f"- pinned commit `{state['commit']}` ({state.get('code_version')}), config `{state['config']}` (resolved "
           f"config hash {state.get('config_hash')}); pinned in turn at {', '.join(f'`{c}`' for c in commits)}, each "
           "move with its reason in [`campaign.json`](campaign.json)",
           "- every file with its sha256, and per setting its commit, hardware and wall time: "
           f"[`manifest.json`](manifest.json); `python -m algo_emu manifest verify {set_dir}` checks them; per-call "
           "load, stalls, epoch times and notes on how settings were made: `campaign.json`"]
    e1_commits = sorted({(e.get("commit") or e.get("replay", {}).get("commit") or "?")[:12]
                         for s, e in done if s.experiment == "heads"})
    if len(e1_commits) > 1:
        out.append(f"- **MIXED: E1's rows combine settings made at {len(e1_commits)} commits ({', '.join(e1_commits)})**")
    out += [f"- running: `{s.name}`: "
            f"{running_words(set_dir / cp.RESUME_DIR / cp._resume_name(s), root)}" for s, st, _ in rows if st == "running"]
    if (set_dir / cp.PRE / "README.md").is_file():
        out.append(f"- kept apart with its own page: E1 records made before the campaign by other commits, which its "
                   f"pinned commit does not reproduce bit for bit, never in these tables: [`{cp.PRE}/README.md`]"
                   f"({cp.PRE}/README.md)")
    out.append(f"- kept apart with its own page: {variants_line(set_dir)}")
    from tools.campaign import converged as cc

    out.append(f"- kept apart with its own page: {cc.line(set_dir)}")
    if (set_dir / "crosscheck" / "README.md").is_file():
        out.append("- beside it, with its own page: the paper's published code run on E1 (H = 4, 6), E3 (H = 6) and "
                   "E4, its numbers beside ours made the same way, and what its E3 models say of E3's factor of two "
                   "(epochs, read-out, one-model variance or implementation; models or test prompts; the training step itself): [`crosscheck/README.md`]"
                   "(crosscheck/README.md)")
    made: dict[tuple[str, str], list[str]] = {}  # (commit, CPU) -> settings, in priority order
    for s, e in done:
        commit = (e.get("commit") or e.get("replay", {}).get("commit") or "?")[:12]
        commit += " (replayed)" if e.get("status") != "done" and e.get("replay") else ""
        made.setdefault((commit, setting_cpus(e)), []).append(f"`{s.name}`")
    out += ["", f"Settings made ({len(done)} of {len(rows)}), by the commit that made them and the CPU(s):", "",
            "| made at | CPU | settings |", "|---|---|---|"]
    out += [f"| {commit} | {cpu} | {', '.join(names)} |" for (commit, cpu), names in made.items()]
    left_out = []
    for s, st, _ in rows:
        if st in ("legacy", "partial"):
            present = [p for p in (set_dir / s.set_path(r) for r in s.records) if p.is_file()]
            made = sorted({str(c)[:12] for p in present for c in record_commits(read_json(p))})
            left_out.append(f"- `{s.name}`: {STATUS_WORDS[st]} ({len(present)} of {len(s.records)} records; "
                            f"commit(s) {', '.join(made)})")
    todo = [(s, st) for s, st, _ in rows if st not in ("done", "adopted")]
    predicted = [cp.predicted_from_benchmark(s) for s, _ in todo]
    bench = read_json(cp.BENCHMARK) if cp.BENCHMARK.is_file() else {}
    cost = (f"; predicted {sum(predicted) / 3600:.0f} h one job at a time on "
            f"{cpu_label(bench.get('environment', {}).get('hardware'))} ([`benchmarks/paper_scale.md`]"
            "(../../../benchmarks/paper_scale.md))" if todo and None not in predicted else "")
    by_exp: dict[str, list[str]] = {}
    for s, _ in todo:
        by_exp.setdefault(s.experiment, []).append(s.name.split("/", 1)[-1])
    out += ["", f"Missing ({len(todo)} settings, in the order `make campaign` runs them{cost}; the report's "
            f"{n_missing_rows} row(s) that wait for them read *{MISSING}* in [`{VERDICTS}`]({VERDICTS})):", ""]
    label = {spec.section: spec.label for spec in SPECS}
    out += [f"- {label[e]}: {', '.join(names)}" for e, names in by_exp.items()] or ["- nothing"]
    if left_out:
        out += ["", "Records in this folder that do NOT enter the tables:", "", *left_out]
    tables = sorted(p.name for p in (set_dir / "tables").glob("*.md"))
    figures = sorted(p.name for p in (set_dir / "figures").glob("*.png"))
    out += ["", "Tables: " + ", ".join(f"[`{n}`](tables/{n})" for n in tables) + ".",
            "Figures: " + ", ".join(f"[`{n}`](figures/{n})" for n in figures) + ".", ""]
    return out


def variants_line(set_dir: Path) -> str:
    """E1's diagnostic variants: a link to their page, or how to make them."""
    from tools.campaign import variants as cv

    if not (set_dir / cv.SUBDIR / "README.md").is_file():
        return f"E1's diagnostic variants (ours, not paper-comparable): {cv.NOT_RUN}"
    return ("E1's diagnostic variants (ours, not paper-comparable; what each changes and whether the paper's value is "
            f"reachable by it): [`{cv.SUBDIR}/README.md`]({cv.SUBDIR}/README.md)")


def build(set_dir: Path, state: dict, root: Path = REPO_ROOT) -> None:
    """The set's tables, figures and page (``README.md``) from its done and adopted records; the pre-campaign page
    and the variants page beside it."""
    from tools import refset
    from algo_emu.report import replication as rep
    from algo_emu.report.manifest import git_state
    from tools.campaign import core as cp
    from tools.campaign import variants as cv

    set_dir = Path(set_dir)
    _, _, wt, cfg = cp.open_campaign(set_dir, root)
    rows = [(s, cp.setting_status(set_dir, state, s), state["settings"].get(s.name, {})) for s in cp.settings(cfg)]
    page_commit = built_by(git_state(root))
    config = wt / state["config"]
    pre_records = sorted(str(p) for p in (set_dir / cp.PRE).glob("heads/*/runs/H*_p*/seed*/metrics.json"))
    if pre_records:
        refset.e1_page(
            set_dir / cp.PRE, config,
            "Before the campaign: E1 records made by earlier commits (not the campaign's evidence)",
            metrics=pre_records, rebuild="python -m tools.campaign page",
            preamble=["These per-seed records were trained before the campaign, by other commits of this project. "
                      "They count as the campaign's evidence only once retraining their first epoch at its pinned "
                      "commit reproduces them bit for bit; for each setting here that replay either differed or has "
                      "not run yet (see [the campaign's page](../README.md)). So they are kept apart, and "
                      "`make campaign` replays or trains these settings again.", ""])
        _unpin_config_path(set_dir / cp.PRE / "README.md", wt, state["config"])
    # E1's variants (ours, own page and manifest): beside the campaign's records of the same settings, made or
    # adopted at its pinned commit only
    e1_done = {s.name: [set_dir / s.set_path(r) for r in s.records] for s, st, _ in rows
               if s.experiment == "heads" and st in ("done", "adopted")}
    cv.build(set_dir, e1_done, page_commit)
    from tools.campaign import converged as cc

    cc.build(set_dir, page_commit)
    verdicts: list = []
    if e1_done:
        verdicts += refset.e1_tables(set_dir, config, metrics=[str(p) for v in e1_done.values() for p in v])["rows"]
        for r in verdicts:
            if r.verdict == "missing from this reference set":
                r.verdict = MISSING
    else:  # derived E1 files of records no longer in the set must not outlive them
        _drop(set_dir, E1_DERIVED)
    verdicts += experiment_rows(set_dir, rows, cfg, Path(state["config"]).name)
    write_verdicts(set_dir, verdicts)
    frame = rep.rows_frame(verdicts)
    shown = frame[frame.verdict != MISSING]
    made_at = sorted({(e.get("commit") or e.get("replay", {}).get("commit") or "?")[:12] for _, st, e in rows
                      if st in ("done", "adopted")})
    intro = ["The paper's scale, made setting by setting; only the settings made so far are in the tables, and "
             "the rows that wait for the others are left off this page (listed under Provenance at the end)."]
    rules = ("**Verdict rules**: stated before any number in [`docs/verdicts.md`](../../../docs/verdicts.md) (the "
             "list every report prints; applied in its order, the first that applies decides); each row's reason cites "
             "its rule as [key].\n")
    text = (rep.render_markdown(shown if not shown.empty else frame, state["config"],
                                {"Results made at commit(s)": ", ".join(made_at) or "none yet"}, VERDICTS, intro, rules)
            if verdicts else "# Replication report\n\nNo setting is made yet.\n")
    extra = provenance(set_dir, state, rows, page_commit, root, int((frame.verdict == MISSING).sum()) if verdicts else 0)
    write_text(set_dir / "README.md", text + "\n" + "\n".join(extra))
