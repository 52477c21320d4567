"""E1 at convergence (ours, never paper-comparable) in the paper-scale set: ``<set>/converged/``.

    snakemake --cores 2 heads_convergence --configfile <config>   # in a clean checkout at one commit
    snakemake --cores 2 heads_converged --configfile <config>     # there too, once a candidate converged at every H
    python -m tools.campaign converged --from <that checkout> [--config <config>] --dir results/reference/paper-scale

``campaign converged`` (:func:`import_converged`) copies what the checkout has made into ``<set>/converged/``,
keeping the layout it has below ``results/``: the convergence check (each configured candidate's per-seed records at
E and 2E epochs, ``tables/heads_convergence.{csv,md}``) and, once ``heads_converged`` has run there, the heads table
at convergence (its per-seed records, tables, fit and figure). It refuses, naming the file and key, what the
variants' import refuses (a missing record, one of another commit or of uncommitted changes, params other than the
config's, a checkout with uncommitted changes to tracked files) and a table not built from these records: the
convergence check is recomputed from them and must be the table's, and each converged record's MSE must be its row's
in ``heads_converged_runs.csv``. ``converged/README.md`` (:func:`build`) shows the tables as the workflow wrote them,
criterion and verdicts included; ``python -m algo_emu manifest verify <set>/converged`` checks every file.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from algo_emu.io import read_json, utc_now
from algo_emu.runtime import REPO_ROOT, config_hash
from tools.campaign.core import DEFAULT_CONFIG, CampaignError, _git, pinned_config
from tools.campaign.variants import (MANIFEST, README, check_made_by, check_params, clean_commit,
                                     committed_code_version, imported_of, install, write_page)

SUBDIR = "converged"
CONFIG_COPY = "config.yaml"  # the config the import read, copied into the subset
KIND = "E1 at convergence (ours, not paper-comparable)"
CHECK = ("tables/heads_convergence.csv", "tables/heads_convergence.md")
CONVERGED = ("tables/heads_converged.csv", "tables/heads_converged.md", "tables/heads_converged_runs.csv",
             "tables/heads_converged_fit.json", "figures/heads_converged.png", "figures/heads_converged.pdf")
NOT_RUN = ("Not run yet. `snakemake --cores 2 heads_convergence` (then `heads_converged`) in a clean checkout at one "
           "commit, then `python -m tools.campaign converged --from <that checkout>` imports it into `converged/` with "
           "its own page and manifest.")


def _records(heads: dict, seeds: list[int]) -> tuple[dict[str, tuple[dict, str]], dict[str, tuple[dict, str]]]:
    """(the convergence check's records, the converged table's): record path below ``results/`` -> (its training
    params as the config makes them, what makes them)."""
    from algo_emu.experiments.heads_settings import BUDGETS, candidate_train_params, candidates, setting_name

    p, conv = heads["p_heads_sweep"], heads["convergence"]
    check = {f"heads/convergence/{c['name']}/{b}/{setting_name(H, p)}/seed{s}/metrics.json":
             (candidate_train_params(heads, c["name"], b, "published"),
              f"heads.convergence.candidates[{c['name']}] at {b}")
             for c in candidates(heads) for b in BUDGETS for H in heads["heads_sweep"] for s in conv["seeds"]}
    name = heads["converged"]["protocol"]
    converged = {f"heads/converged/{name}/{protocol}/runs/{setting_name(H, p)}/seed{s}/metrics.json":
                 (candidate_train_params(heads, name, "x1", protocol), f"heads.converged ({name}, {protocol})")
                 for protocol in heads["converged"]["protocols"] for H in heads["heads_sweep"] for s in seeds}
    return check, converged


def _read_checked(results: Path, wanted: dict[str, tuple[dict, str]], commit: str, code_version: str) -> dict:
    out = {}
    for rel, (params, what) in wanted.items():
        path = results / rel
        if not path.is_file():
            raise CampaignError(f"{path}: missing: {what} has no record of this seed (the import needs every one)")
        rec = read_json(path)
        check_made_by(path, rec, commit, code_version)
        check_params(path, rec, params, what)
        out[rel] = rec
    return out


def import_converged(set_dir: str | Path, checkout: str | Path, config: str = DEFAULT_CONFIG) -> dict:
    """Copy the convergence check (and the converged table, when made) of ``checkout`` into ``<set_dir>/converged/``
    after the checks above, with its manifest; return the manifest's ``imported``."""
    from algo_emu.experiments.heads_converged import convergence_check, load_convergence_runs

    set_dir, checkout = Path(set_dir), Path(checkout).resolve()
    commit = clean_commit(set_dir, checkout)
    cfg = pinned_config(checkout, config)
    heads = cfg["heads"]
    code_version = committed_code_version(checkout, commit)
    results = checkout / cfg.get("workdir", ".") / "results"  # where the config's workflow writes
    check, converged = _records(heads, list(cfg["seeds"]))
    recs = _read_checked(results, check, commit, code_version)
    for rel in CHECK:
        if not (results / rel).is_file():
            raise CampaignError(f"{results / rel}: missing (made by `snakemake heads_convergence`)")
    table = pd.read_csv(results / CHECK[0])
    again = convergence_check(load_convergence_runs(heads, [str(results / r) for r in check]), heads)
    try:
        pd.testing.assert_frame_equal(table, again, check_dtype=False, rtol=1e-12)
    except AssertionError as exc:
        raise CampaignError(f"{results / CHECK[0]}: not the convergence check of these records (rebuild it: snakemake "
                            f"heads_convergence): {str(exc).splitlines()[0]}") from None
    rels = [*check, *CHECK]
    made = (results / CONVERGED[0]).is_file()
    if made:
        recs |= _read_checked(results, converged, commit, code_version)
        for rel in CONVERGED:
            if not (results / rel).is_file():
                raise CampaignError(f"{results / rel}: missing (made by `snakemake heads_converged`)")
        runs = pd.read_csv(results / CONVERGED[2])
        for rel in converged:
            rec = recs[rel]
            row = runs[(runs.protocol == rec["protocol"]) & (runs.heads == rec["setting"]["heads"])
                       & (runs.seed == rec["seed"])]
            if len(row) != 1 or not math.isclose(float(row.mse.iloc[0]), rec["mse"], rel_tol=1e-9):
                raise CampaignError(f"{results / CONVERGED[2]}: ({rec['protocol']}, H = {rec['setting']['heads']}, "
                                    f"seed {rec['seed']}) is {row.mse.tolist()}, its record's mse {rec['mse']}: not "
                                    "the table of these records (rebuild it: snakemake heads_converged)")
        rels += [*converged, *CONVERGED]
    jobs = {str(Path(rel).parent.parent): rec for rel, rec in recs.items()}  # one job trains all seeds of a setting
    imported = {"when": utc_now(), "from_commit": commit, "code_version": code_version, "config": config,
                "config_hash": config_hash(cfg), "by_commit": _git("rev-parse", "HEAD", cwd=REPO_ROOT, check=False)
                or None, "converged": made,
                "train_seconds": round(sum(sum(r.get("timing", {}).get("epoch_seconds", [])) for r in jobs.values()), 1),
                "hardware": next(iter(recs.values()))["environment"].get("hardware"),
                "device": next(iter(recs.values()))["environment"].get("device")}
    # the config itself beside what it made (it may be a file of the checkout's that its commit does not hold)
    install(set_dir, SUBDIR, results, rels, imported, KIND, {CONFIG_COPY: checkout / config})
    return imported


def line(set_dir: Path) -> str:
    """The set's page line: a link to the subset's page, or how to make it."""
    if not (Path(set_dir) / SUBDIR / MANIFEST).is_file():
        return f"E1 at convergence (ours, not paper-comparable): {NOT_RUN}"
    return ("E1 at convergence (ours, not paper-comparable; which training protocol converges at every H, and the "
            f"heads table trained with it): [its own page]({SUBDIR}/{README})")


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def build(set_dir: Path, page_commit: str) -> None:
    """Write ``<set>/converged/README.md`` (and its manifest anew when the page changed): provenance, then the tables
    as the workflow wrote them; nothing when the set has no such subset."""
    cdir = Path(set_dir) / SUBDIR
    if not (cdir / MANIFEST).is_file():
        return
    imported = imported_of(cdir, "campaign converged")
    page = ["# E1 at convergence (ours, not paper-comparable)", "",
            "Does the heads table's O(1/H) survive training to convergence? First a training protocol that converges "
            "at every H is selected by a criterion stated before the numbers, then the heads table is trained with "
            "it. Ours, beside the replication of arXiv 2508.17550v2, E1; never beside the paper's numbers as if "
            "comparable (the paper trains 50 epochs).", "",
            f"- made by commit `{imported['from_commit'][:12]}` ({imported['code_version']}) through its own workflow "
            f"(config `{imported['config']}`, copied here as [`{CONFIG_COPY}`]({CONFIG_COPY}), resolved config hash "
            f"{imported['config_hash']}); checked at import: "
            "every record names that commit and the training-source digest its committed files give, its params are "
            "the config's, and the tables are these records'",
            f"- imported {imported['when']} by commit `{(imported.get('by_commit') or '?')[:12]}`; this page built by "
            f"commit `{page_commit}`; {_duration(imported['train_seconds'])} of training in all "
            f"({imported.get('device')}); `python -m algo_emu manifest verify <set>/{SUBDIR}` checks every file", "",
            "## Which protocol converges", "", (cdir / CHECK[1]).read_text().strip(), ""]
    if imported["converged"]:
        page += ["## The heads table at convergence", "", (cdir / CONVERGED[1]).read_text().strip(), "",
                 f"![E1 at convergence]({CONVERGED[4]})", ""]
    elif (pd.read_csv(cdir / CHECK[0]).selected == "yes").any():
        page += ["## The heads table at convergence", "", "Not trained yet (`snakemake heads_converged` in the same "
                 "checkout, then import again).", ""]
    else:  # the check selected nothing: the table is refused, not pending
        page += ["## The heads table at convergence", "", "Not trained: no candidate converges at every H (the check "
                 "above), so `snakemake heads_converged` refuses. A candidate added to heads.convergence.candidates is "
                 "checked the same way.", ""]
    write_page(cdir, page, imported, KIND)
