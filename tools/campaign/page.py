"""The campaign's page, ``<set>/README.md``: what is done, what is running, what is left (with its
predicted hours), then the replication report built from what is done.

Only settings made at the pinned commit ("done") or shown identical to it by a replay ("adopted")
enter the tables; every other record in the set (another commit, a missing seed) is named and left
out, never averaged in. E1's variants (ours, not paper-comparable) have a short section here and their own page
and manifest under ``variants/`` (:mod:`tools.campaign.variants`); "not run yet" while the set has none.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from algo_emu import records
from algo_emu.io import read_json, write_text
from tools.campaign.load import STALL_SHARE, load_words
from algo_emu.runtime import REPO_ROOT, cpu_key, cpu_label

STATUS_WORDS = {
    "done": "done at the pinned commit",
    "adopted": "made by another commit, replayed bit for bit at the pinned commit",
    "legacy": "made by another commit, not (yet) shown identical: left out",
    "partial": "some seeds missing: left out",
    "running": "started; resume state committed",
    "todo": "to do",
}


def _fmt_h(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds / 3600:.1f} h"


def predicted_seconds(set_dir: Path, s, done_walls: dict[str, float]) -> tuple[float | None, str]:
    """Predicted wall time of a setting on this project's 2-core machine, and where the number comes from."""
    from tools.campaign import core as cp

    bench = cp.predicted_from_benchmark(s)
    if bench is not None:
        return bench, "benchmark"
    same = [w for name, w in done_walls.items() if name.split("/")[0] == s.experiment]
    if same:
        return statistics.median(same), f"median of {len(same)} committed {s.experiment} setting(s)"
    return None, "not benchmarked yet"


# ---------------------------------------------------------------------------------------------------------
# The other experiments' sections: built from their done settings' records by the checkout's own aggregation
# and verdict code (the same functions the workflow's aggregate rules and the replication report call)
# ---------------------------------------------------------------------------------------------------------

#: Derived files each section writes into the set; removed when the experiment has no done setting left, so
#: that no table outlives its records.
DERIVED = {
    "ames": ("tables/ames.*", "tables/ames_runs.*", "tables/ames_ablation.*", "figures/ames.*",
             "figures/ames_ablation.*"),
    "essay": ("figures/essay_icl.*",),
    "statistical": ("tables/statistical_emulation.*", "tables/statistical_runs.*", "tables/statistical_ablation.*",
                    "tables/statistical_ablation_runs.*", "figures/statistical_heads.*",
                    "figures/statistical_training.*"),
    "theorem31": ("tables/f_emulation.*", "tables/f_gd_step.*", "tables/f_emulation_ablation.*",
                  "tables/f_emulation_ablation_runs.*", "tables/theorem31_runs.*", "figures/f_emulation.*"),
}


def _records(set_dir: Path, done: list, part: str = "") -> list[str]:
    """The done settings' record paths in the set (``part``: only those whose path holds it)."""
    return [str(set_dir / s.set_path(r)) for s in done for r in s.records if part in r]


def _section(title: str, done: list, left: list[str], rows: list, tables: list[Path], figures: list[str],
             rows_out: list | None = None) -> list[str]:
    """An experiment's section: what is done and left, the report's rows for it, its tables and figures (its rows,
    as the page prints them, appended to ``rows_out``)."""
    from algo_emu.report import replication as rep

    for r in rows:
        if r.verdict in ("not run at this scale", "not available"):  # tables hold the done settings only
            r.verdict, r.reason = MISSING, "not yet made at the pinned commit (`make campaign` runs it)"
        elif left:
            r.reason = f"{r.reason}; from the settings done only ({len(left)} of this experiment's not done yet)"
    if rows_out is not None:
        rows_out += rows
    out = [f"## {title} from the settings done", "",
           f"Done: {', '.join(f'`{s.name}`' for s in done)}" + (f"; not done yet: {', '.join(left)}" if left else "")
           + ". Each setting's models and their weight-blind baselines were trained by the pinned commit's own jobs; "
           "the tables below are that experiment's own aggregation of their per-seed records.", "",
           "### The paper's claims beside ours (verdict rules below)", "", *rep.rows_markdown(rep.rows_frame(rows)),
           "### Tables", ""]
    for t in tables:
        out += [t.with_suffix(".md").read_text(), ""]
    return out + ["### Figures", "", *[f"![{f}](figures/{f}.png)\n" for f in figures]]


def statistical_section(set_dir: Path, done: list, cfg: dict, config_name: str, left: list[str],
                        rows_out: list | None = None) -> list[str]:
    """E3 from its done (mode, H) settings: ``statistical aggregate``'s tables and figure, the report's E3 rows."""
    from algo_emu.experiments import statistical as st
    from algo_emu.report import replication as rep

    t, _ = _fresh(set_dir, "statistical")
    # the table is every (mode, H) of its modes and H values: the done modes at the H values done in each of them
    by_mode: dict[str, set[int]] = {}
    for s in done:
        mode, H = s.name.split("/", 1)[1].rsplit("_H", 1)
        by_mode.setdefault(mode, set()).add(int(H))
    heads = sorted(set.intersection(*by_mode.values()))
    tabled = [s for s in done if int(s.name.rsplit("_H", 1)[1]) in heads]
    left = left + [f"{s.name} (made; tabled once its H is done in every mode)" for s in done if s not in tabled]
    params = dict(cfg["statistical"], modes=[m for m in cfg["statistical"]["modes"] if m in by_mode], heads_sweep=heads)
    done = tabled
    st.aggregate(params, _records(set_dir, done), str(t / "statistical_runs.csv"),
                 str(t / "statistical_emulation.csv"), str(t / "statistical_ablation.csv"),
                 str(t / "statistical_ablation_runs.csv"))
    st.figure(str(t / "statistical_emulation.csv"), str(t / "statistical_runs.csv"),
              str(set_dir / "figures/statistical_heads"))
    return (_section("E3", done, left, rep.e3_rows(t, cfg, config_name),
                     [t / "statistical_emulation.csv", t / "statistical_ablation.csv"], ["statistical_heads"], rows_out)
            + training_vs_paper_lines(set_dir, _records(set_dir, done)))


def training_vs_paper_lines(set_dir: Path, metrics: list[str]) -> list[str]:
    """Where the paper's Appendix C.1 values sit on our training curves (the published protocol's H values done),
    with its figure ``figures/statistical_training``; nothing when no such H is done."""
    from algo_emu.experiments.statistical_tables import PAPER_ALGORITHMS, paper_on_training_curve
    from algo_emu.plots.statistical import training_vs_paper_figure

    info = paper_on_training_curve(metrics)
    if not info:
        return []
    training_vs_paper_figure(info, str(set_dir / "figures/statistical_training"))
    out = ["### The published protocol's MSE against the paper's: where the paper's values sit on our training", "",
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
            "![E3: our training loss against the paper's level](figures/statistical_training.png)", ""]
    return out


def theorem31_section(set_dir: Path, done: list, cfg: dict, config_name: str, left: list[str],
                      rows_out: list | None = None) -> list[str]:
    """E2 from its done prompt lengths: ``theorem31 aggregate``'s tables and figure, the report's E2 rows."""
    from algo_emu.experiments import theorem31 as t31
    from algo_emu.report import replication as rep

    t, _ = _fresh(set_dir, "theorem31")
    params = dict(cfg["theorem31"], p_sweep=sorted(int(s.name.split("/p", 1)[1]) for s in done))
    t31.aggregate(params, _records(set_dir, done, "/runs/"), str(t / "theorem31_runs.csv"),
                  str(t / "f_emulation.csv"), str(t / "f_gd_step.csv"), _records(set_dir, done, "/blind/"),
                  str(t / "f_emulation_ablation.csv"), str(t / "f_emulation_ablation_runs.csv"))
    t31.figure(str(t / "f_emulation.csv"), str(t / "f_gd_step.csv"), str(t / "theorem31_runs.csv"),
               str(set_dir / "figures/f_emulation"))
    return _section("E2", done, left, rep.e2_rows(t, cfg, config_name),
                    [t / "f_emulation.csv", t / "f_gd_step.csv", t / "f_emulation_ablation.csv"], ["f_emulation"],
                    rows_out)



#: Every row of the sections above as the page prints them (E2-E4 and the essay; E1's are in its own tables):
#: what the README's summary counts.
VERDICTS = "tables/campaign_verdicts.csv"
#: A row whose setting the set does not hold yet.
MISSING = "missing from this set"


def _drop(set_dir: Path, patterns) -> None:
    for pattern in patterns:
        for f in set_dir.glob(pattern):
            f.unlink()


def _fresh(set_dir: Path, experiment: str) -> tuple[Path, Path]:
    """An experiment's derived files removed before its section writes them anew; (tables, figures) folders."""
    _drop(set_dir, DERIVED[experiment])
    tables, figures = set_dir / "tables", set_dir / "figures"
    tables.mkdir(parents=True, exist_ok=True)
    figures.mkdir(parents=True, exist_ok=True)
    return tables, figures


def ames_section(set_dir: Path, done: list, cfg: dict, config_name: str, rows_out: list | None = None) -> list[str]:
    """E4 from its done modes: ``ames aggregate``'s tables, ``ames figure``'s figures (where every done mode's
    predictions are in the set), and the replication report's E4 rows; a mode not done yet is named."""
    from algo_emu.experiments import ames
    from algo_emu.report import replication as rep

    tables, figures = _fresh(set_dir, "ames")
    by_mode = {s.name.split("/", 1)[1]: s for s in done}
    modes = [m for m in cfg["ames"]["modes"] if m in by_mode]
    left = [m for m in cfg["ames"]["modes"] if m not in by_mode]
    metrics = [str(set_dir / by_mode[m].set_path(r)) for m in modes for r in by_mode[m].records]
    ames.aggregate(modes, metrics, tables / "ames.csv", tables / "ames_runs.csv", tables / "ames_ablation.csv")
    preds = [set_dir / "ames" / m / "predictions.csv" for m in modes]
    rows = rep.e4_rows(tables, cfg, config_name)
    for r in rows:
        if left:
            r.reason = f"{r.reason}; from mode(s) {', '.join(modes)} only: {', '.join(left)} not done yet"
    if rows_out is not None:
        rows_out += rows
    out = ["## E4 from the settings done", "",
           f"Modes done: {', '.join(modes)}" + (f"; not done yet: {', '.join(left)}" if left else "") + ". "
           "Each mode's emulators and their weight-blind baselines (same budget, the prompt's weights blanked) were "
           "trained together by one job of the pinned commit; these tables are `ames aggregate` of their per-seed "
           "records.", "", "### The paper's claim beside ours (verdict rules below)", "",
           *rep.rows_markdown(rep.rows_frame(rows)), "### Table", "", (tables / "ames.md").read_text(), "",
           "### Ablation: the prompt's weights removed, permuted or replaced", "",
           (tables / "ames_ablation.md").read_text(), ""]
    if all(p.is_file() for p in preds):
        ames.figure(str(tables / "ames.csv"), str(tables / "ames_runs.csv"), [str(p) for p in preds],
                    str(figures / "ames"), str(tables / "ames_ablation.csv"), str(figures / "ames_ablation"))
        out += ["### Figures", "", "![E4](figures/ames.png)", "", "![E4 ablation](figures/ames_ablation.png)", ""]
    else:
        out += [f"No figure: {', '.join(str(p.relative_to(set_dir)) for p in preds if not p.is_file())} not in the "
                "set (`make campaign` copies it from the worktree that made the records).", ""]
    return out


def essay_section(set_dir: Path, cfg: dict, config_name: str, rows_out: list | None = None) -> list[str]:
    """E6 from its done setting: the claims table its pinned commit's ``essay claims`` wrote, gated by the
    checkout's replication rules (a claim counts only where the main model is within 10 % of the Bayes-optimal
    ridge at the longest context), with its learning check and figures."""
    import pandas as pd

    from algo_emu.essay import claims as ec
    from algo_emu.plots import essay as pe
    from algo_emu.report import replication as rep

    tables, figures = _fresh(set_dir, "essay")
    claims, curves = tables / "essay_claims.csv", tables / "essay_curves.csv"
    missing = [p.name for p in (claims, curves, tables / "essay_equivalences.csv") if not p.is_file()]
    if missing:
        return ["## E6 (the essay) from the setting done", "",
                f"Not built: {', '.join(missing)} missing from `tables/` (`make campaign` copies them from the worktree "
                "that made the records).", ""]
    check = ec.learning_check(pd.read_csv(curves))
    rows = rep.essay_rows(claims, cfg)
    if rows_out is not None:
        rows_out += rows
    pe.plot_icl(pd.read_csv(curves), cfg["essay"], figures / "essay_icl")
    e = cfg["essay"]
    return ["## E6 (the essay) from the setting done", "",
            f"- scale: `{config_name}` essay section: seeds {e.get('seeds')}, model {e['model']}, main model "
            f"{e['train']['steps']} steps",
            f"- the gate (did the main model learn?): {check['text']}: "
            + ("**learned**: the claims below count" if check["learned"] == "yes" else
               "**did not learn**: no claim below counts (each reads 'did not learn')"), "",
            *rep.rows_markdown(rep.rows_frame(rows)),
            "![E6 in-context learning curves](figures/essay_icl.png)", "",
            "The float64 equivalences the essay's claims build on (no training): `tables/essay_equivalences.md`.", ""]


def other_sections(set_dir: Path, rows: list, cfg: dict, config_name: str, verdicts: list) -> list[str]:
    """The sections of every experiment but E1 with a done setting, in the campaign's priority order, each
    from its done settings only; an experiment with none keeps no derived table or figure. Their verdict rows are
    appended to ``verdicts``."""
    done: dict[str, list] = {}
    left: dict[str, list[str]] = {}
    for s, st, _, _ in rows:
        if s.experiment != "heads":
            (done.setdefault(s.experiment, []).append(s) if st in ("done", "adopted")
             else left.setdefault(s.experiment, []).append(s.name))
    out: list[str] = []
    for exp in DERIVED:
        if exp not in done:
            _drop(set_dir, DERIVED[exp])
    _drop(set_dir, (VERDICTS,))
    for exp, settings_done in done.items():
        if exp == "essay":
            out += essay_section(set_dir, cfg, config_name, verdicts)
        elif exp == "ames":
            out += ames_section(set_dir, settings_done, cfg, config_name, verdicts)
        else:
            section = statistical_section if exp == "statistical" else theorem31_section
            out += section(set_dir, settings_done, cfg, config_name, left.get(exp, []), verdicts)
    return out


def write_verdicts(set_dir: Path, verdicts: list) -> None:
    """Every verdict row of the page (E1's first), the table the README's summary counts."""
    if verdicts:
        from algo_emu.io import write_csv
        from algo_emu.report import replication as rep

        write_csv(set_dir / VERDICTS, rep.rows_frame(verdicts))


def _unpin_config_path(readme: Path, wt: Path, config: str) -> None:
    """The page names the config as the repository does, not by the worktree's absolute path."""
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

def build(set_dir: Path, state: dict, root: Path = REPO_ROOT) -> None:
    from tools.campaign import core as cp
    from tools.docs_numbers import essay_bar_summary
    from algo_emu import refset
    from algo_emu.report.manifest import git_state

    _, _, wt, cfg = cp.open_campaign(set_dir, root)
    rows, e1_metrics, left_out = [], [], []
    done_walls: dict[str, float] = {}
    for s in cp.settings(cfg):
        st = cp.setting_status(set_dir, state, s)
        entry = state["settings"].get(s.name, {})
        wall = entry.get("wall_seconds")
        if wall is None and st in ("done", "adopted", "legacy"):
            recs = [read_json(set_dir / s.set_path(r)) for r in s.records]
            wall = max((r.get("timing", {}).get("wall_seconds_job") or 0.0) for r in recs) or None
        if wall and st in ("done", "adopted", "legacy"):
            done_walls[s.name] = wall
        pre = [set_dir / cp.PRE / s.set_path(r) for r in s.records]
        if st == "todo" and all(p.is_file() for p in pre):  # retired: its earlier run measured the cost
            wall = max((read_json(p).get("timing", {}).get("wall_seconds_job") or 0.0) for p in pre) or None
        rows.append((s, st, entry, wall))
        paths = [str(set_dir / s.set_path(r)) for r in s.records]
        if st in ("done", "adopted") and s.experiment == "heads":
            e1_metrics += paths
        elif st in ("legacy", "partial"):
            present = [p for p in paths if Path(p).is_file()]
            commits = sorted({str(c)[:12] for p in present for c in records.record_commits(read_json(p))})
            left_out.append(f"- `{s.name}`: {STATUS_WORDS[st]} ({len(present)} of {len(paths)} records; "
                            f"commit(s) {', '.join(commits)})")
    left_h = 0.0
    table = ["| # | setting | status | wall time | made at | why |", "|---|---|---|---|---|---|"]
    unknown = []
    for i, (s, st, entry, wall) in enumerate(rows, 1):
        commit = "" if st not in ("done", "adopted") else entry.get("commit") or entry.get("replay", {}).get("commit", "")
        if st in ("done", "adopted"):
            when = _fmt_h(wall)
        elif wall:  # a retired setting: its own earlier run on this project's machines
            pred, source = wall, "its pre-campaign run"
            when = f"predicted {_fmt_h(pred)} ({source})"
            left_h += pred / 3600
        else:
            pred, source = predicted_seconds(set_dir, s, done_walls)
            when = f"predicted {_fmt_h(pred)} ({source})"
            if pred is None:
                unknown.append(s.name)
            else:
                left_h += pred / 3600
        word = STATUS_WORDS[st]
        if st == "todo" and entry.get("replay") and not entry["replay"]["match"]:
            word = "its earlier records differ from the pinned commit's (replay below): moved to pre-campaign/"
        elif st == "todo" and all((set_dir / cp.PRE / s.set_path(r)).is_file() for r in s.records):
            word = "earlier records kept in pre-campaign/, replayed by the next run before any training"
        elif st == "running":
            word = running_words(set_dir / cp.RESUME_DIR / cp._resume_name(s), root)
        table.append(f"| {i} | `{s.name}` | {st}: {word} | {when} | {commit[:12]} | {s.why} |")
    n_done = sum(st in ("done", "adopted") for _, st, _, _ in rows)
    # the same settings left, priced by the benchmark of every machine it was made on (the hours are per machine)
    left_on = []
    for path in cp.benchmark_files(root):
        bench = read_json(path)
        cpu = cpu_label(bench.get("environment", {}).get("hardware"))
        left = [cp.predicted_from_benchmark(s, bench) for s, st, _, _ in rows if st not in ("done", "adopted")]
        if left and all(x is not None for x in left):
            left_on.append(f"{sum(left) / 3600:.0f} h on {cpu} (`benchmarks/{path.name}`)")
    replays = [f"- `{s.name}`: {'MATCH' if e['replay']['match'] else 'DIFFERS'}: {e['replay']['compared']} "
               f"train losses (epoch 1 of every member) retrained at {e['replay']['commit'][:12]} with "
               f"{e['replay']['threads']} thread(s), max |difference| {e['replay']['max_abs_diff']:.3g}; records made "
               f"by {', '.join(c[:12] for c in e['replay']['records_commits'] if c)} "
               f"({', '.join(e['replay']['records_code_versions'])})"
               for s, st, e, _ in rows if e.get("replay")]
    moves = [f"- {m['when']}: {'started at' if not m['from'] else 'moved from ' + m['from'][:12] + ' to'} "
             f"{m['to'][:12]}: {m['reason']}" for m in state["moves"]]
    page_commit = built_by(git_state(root))
    pre = [
        "## The campaign", "",
        f"- pinned commit: `{state['commit']}` ({state.get('code_version')}); config `{state['config']}` "
        f"(resolved config hash {state.get('config_hash')})",
        f"- settings: {n_done} of {len(rows)} done; left: {len(rows) - n_done}, predicted "
        + (f"one job at a time (each machine's own benchmark; the table below prices by the first): "
           f"{'; '.join(left_on)}" if left_on else
           f"{left_h:.0f} h on this project's 2-core CPU" + (f" plus {len(unknown)} not yet benchmarked" if unknown else "")),
        f"- records are made by the pinned commit through its own workflow (`make campaign`: Snakemake targeted "
        f"at one setting's per-seed records); tables, fits, figures and this page were built from them by "
        f"commit `{page_commit}`; `python -m algo_emu manifest verify {set_dir}` checks every file",
        "- the essay's claims (E6) are one setting, its whole DAG at the config's essay scale; they count only "
        "where its trained model is within 10 % of the Bayes-optimal ridge at the longest context (before the "
        f"campaign, `benchmarks/essay_bar.py` measured: {essay_bar_summary(root)}); "
        "E5 is not a campaign setting: it needs no training (its constructions are exact at every scale)",
        "", "Moves of the campaign:", "", *moves, "",
        "Settings in priority order:", "", *table, "",
    ]
    multi = []
    for s, st, e, _ in rows:
        calls = e.get("calls", []) if st == "done" else []
        if len({str(cpu_key(c.get("hardware"))) for c in calls}) > 1:
            multi.append(f"- `{s.name}`: " + "; ".join(
                f"{cpu_label(c['hardware'])} from {c['started']}"
                + (f" (resumed at epoch {max(c['resumed_from'].values())})" if c.get("resumed_from") else "")
                for c in calls))
    if multi:
        pre += ["Settings carried over between machines (the same code; float rounding depends on the CPU, so such "
                "a setting is not bit-reproducible on one machine):", "", *multi, ""]
    loads = [f"- `{s.name}`, the call from {c['started']}: {load_words(c['load'])}"
             + (f"; stalls: {', '.join(f'{a} ({b / 60:.0f} min)' for a, b in c['load']['stalls'])}"
                if c["load"].get("stalls") else "")
             for s, st, e, _ in rows if st == "done" for c in e.get("calls", []) if c.get("load")]
    if loads:
        pre += ["What shared the machine with each call, measured while it ran (`tools.campaign.load`: the job's CPU and "
                "everything else's, as shares of the cores' time; a stall is a stretch in which the job used under "
                f"{STALL_SHARE:.0%} of one core: paused or starved). A call's epoch times include its stalls and "
                "slow down with others' share; the cost check in the README reads them beside the prediction:",
                "", *loads, ""]
    if replays:
        pre += ["Records made before the campaign, replayed at its commit:", "", *replays, ""]
    if state.get("notes"):
        pre += ["Notes (what was measured, and how):", "", *[f"- {n}" for n in state["notes"]], ""]
    pre_records = sorted(str(p) for p in (set_dir / cp.PRE).glob("heads/*/runs/H*_p*/seed*/metrics.json"))
    if pre_records:
        pre += ["Records made before the campaign by other commits, which its pinned commit does not reproduce bit "
                "for bit, are kept apart with their own page and tables: "
                f"[`{cp.PRE}/README.md`]({cp.PRE}/README.md). They never enter the tables of this page.", ""]
    if left_out:
        pre += ["Records in this folder that do NOT enter the tables below:", "", *left_out, ""]
    e1_commits = sorted({(e.get("commit") or e.get("replay", {}).get("commit") or "?")[:12]
                         for s, st, e, _ in rows if s.experiment == "heads" and st in ("done", "adopted")})
    if len(e1_commits) > 1:
        pre += [f"**MIXED: the E1 tables below combine settings made at {len(e1_commits)} commits "
                f"({', '.join(e1_commits)}); each setting's commit is in the table above.**", ""]
    from tools.campaign import variants as campaign_variants

    # E1's variants (ours, with their own page and manifest under variants/): beside the campaign's records of the
    # same settings, those made or adopted at its pinned commit only
    done_e1 = {s.name: [set_dir / s.set_path(r) for r in s.records] for s, st, _, _ in rows
               if s.experiment == "heads" and st in ("done", "adopted")}
    pre += campaign_variants.build(set_dir, done_e1, page_commit)
    pre += ["## E1 from the settings done", ""]
    if pre_records:
        refset.e1_page(
            set_dir / cp.PRE, wt / state["config"],
            "Before the campaign: E1 records made by earlier commits (not the campaign's evidence)",
            metrics=pre_records, rebuild="python -m tools.campaign page",
            preamble=["These per-seed records were trained before the campaign, by other commits of this project "
                      "on its 2-core machines. They count as the campaign's evidence only once retraining their "
                      "first epoch at its pinned commit reproduces them bit for bit; for each setting here that "
                      "replay either differed or has not run yet (see [the campaign's page](../README.md)). So they "
                      "are kept apart, and `make campaign` replays or trains these settings again.", ""])
        _unpin_config_path(set_dir / cp.PRE / "README.md", wt, state["config"])
    if not e1_metrics:  # derived E1 files of records no longer in the set must not outlive them
        for pattern in ("tables/heads_*", "tables/prompt_length_*", "figures/heads_vs_mse.*",
                        "figures/prompt_length_vs_mse.*"):
            for f in set_dir.glob(pattern):
                f.unlink()
    other_verdicts: list = []
    others = other_sections(set_dir, rows, cfg, Path(state["config"]).name, other_verdicts)
    e1_verdicts: list = []
    if e1_metrics:
        e1 = refset.e1_page(set_dir, wt / state["config"], "The paper's scale: the campaign's committed set",
                            metrics=e1_metrics, preamble=pre, rebuild="python -m tools.campaign page",
                            sections=others)
        e1_verdicts = e1["rows"]
        _unpin_config_path(set_dir / "README.md", wt, state["config"])
    else:
        write_text(set_dir / "README.md", "# The paper's scale: the campaign's committed set\n\n" + "\n".join(pre)
                   + "\nNo E1 setting is done yet.\n\n" + "\n".join(others))
    write_verdicts(set_dir, e1_verdicts + other_verdicts)
