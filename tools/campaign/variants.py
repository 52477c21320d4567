"""E1's variants (``heads.variants``: ours, never paper-comparable) in the paper-scale set: ``<set>/variants/``.

    snakemake --cores 2 heads_variants --configfile config/config.yaml    # in a clean checkout at one commit
    python -m tools.campaign variants --from <that checkout> --dir results/reference/paper-scale

``campaign variants`` (:func:`import_variants`) copies a finished variants run from the checkout's ``results/`` into
``<set>/variants/``, keeping the layout it has below ``results/``: each variant's per-seed records
(``heads/variants/<name>/seed<k>/metrics.json``), its tables (``tables/heads_variants.{csv,md,tex}``, learning curves
``tables/heads_variants_curves.csv``) and figure (``figures/heads_variants.{png,pdf}``). It refuses, naming the file
and key, a run where a configured variant lacks a configured seed, a record names another commit than the
checkout's, a record says or shows that it was made from uncommitted changes (``environment.git_dirty``; its
``environment.code_version``, the digest of the training sources, differs from the one the commit's committed files
give), a record's parameters are not its variant's, the checkout has uncommitted changes to tracked files, or the
table was not built from these records. Everything is copied into a temporary folder beside ``variants/`` and
renamed onto it at the end: a refusal or a crash leaves the set as it was. ``variants/manifest.json`` lists every
file of the subset (sha256) with the commit that made it; ``python -m algo_emu manifest verify <set>/variants``
checks it, and the set's own manifest lists the subset's files as well.

The set's page build (:func:`tools.campaign.page.build`) then writes ``variants/README.md`` (:func:`build`), which
the set's page links to: two questions, each with its rule stated before its numbers, every number read from the
imported table and curves and from the campaign's own records of the same setting and seeds:

1. reach: does a variant's seed-mean composed-head test MSE at its last epoch come within the paper's mean plus
   :data:`REACH_STDS` of its standard deviations (:mod:`algo_emu.paper_values`)?
2. late rise: does the protocol's composed-head test MSE end more than :data:`RISE` above its own minimum over the
   evaluated epochs while the cosine-decay variant's ends within :data:`RISE` of its minimum?
"""

from __future__ import annotations

import io as _io
import math
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pandas as pd

from algo_emu import paper_values
from tools.campaign.core import DEFAULT_CONFIG, CampaignError, _git, load_state, pinned_config, pinned_env
from algo_emu.io import read_json, utc_now, write_json, write_text
from algo_emu.runtime import REPO_ROOT, config_hash, cpu_label

SUBDIR = "variants"
RECORD = "heads/variants/{name}/seed{seed}/metrics.json"  # below results/ and below <set>/variants/
TABLE = "tables/heads_variants.csv"
CURVES = "tables/heads_variants_curves.csv"
FIGURE = "figures/heads_variants.png"
#: Outputs of ``snakemake heads_variants`` the subset keeps (paths below ``results/``).
OUTPUTS = (TABLE, "tables/heads_variants.md", "tables/heads_variants.tex", CURVES, FIGURE, "figures/heads_variants.pdf")
README = "README.md"
MANIFEST = "manifest.json"

#: Rule 1 (two-sided): a variant's seed-mean final MSE within mean +- REACH_STDS * std of the paper's value reaches
#: it; below that band it beats it; above, it does not reach it.
REACH_STDS = 1.0
#: Rule 2: a curve rises late when its final MSE exceeds its minimum over the evaluated epochs by more than this.
RISE = 0.10
#: Record parameters a variant may differ in from its config: the attention implementation, resolved per machine
#: (the same mathematics, tested).
FREE_PARAMS = ("attention",)


# ---------------------------------------------------------------------------------------------------------
# Import
# ---------------------------------------------------------------------------------------------------------

def committed_code_version(checkout: Path, commit: str) -> str:
    """The ``code_version`` that ``commit``'s committed package source gives (its own definition of it, run on a
    ``git archive`` of ``src/algo_emu``): what a record made from that commit with a clean tree names."""
    arch = subprocess.run(["git", "archive", "--format=tar", commit, "src/algo_emu"], cwd=checkout,
                          capture_output=True, check=False)
    if arch.returncode != 0:
        raise CampaignError(f"{checkout}: git archive {commit[:12]} src/algo_emu failed: "
                            f"{arch.stderr.decode(errors='replace').strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(fileobj=_io.BytesIO(arch.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        out = subprocess.run([sys.executable, "-c", "from algo_emu.runtime import code_version; print(code_version())"],
                             cwd=tmp, env=pinned_env(Path(tmp)), capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise CampaignError(f"{checkout}: the code version of {commit[:12]} could not be computed:\n"
                            f"{out.stderr[-2000:]}")
    return out.stdout.strip()


def _check_record(path: Path, rec: dict, v: dict, heads: dict, seed: int, commit: str, code_version: str) -> None:
    """Refuse, naming the file and key, a record that is not seed ``seed`` of variant ``v`` made at ``commit`` from
    its committed files."""
    from algo_emu.experiments.heads_settings import variant_protocol, variant_train_params

    name = v["name"]
    if rec.get("variant") != name or rec.get("paper_comparable") is not False:
        raise CampaignError(f"{path}: variant = {rec.get('variant')!r}, paper_comparable = "
                            f"{rec.get('paper_comparable')!r}: not a record of heads.variants[{name}]")
    got = (rec.get("protocol"), rec.get("setting", {}).get("heads"), rec.get("setting", {}).get("p"), rec.get("seed"))
    want = (variant_protocol(v), v["heads"], v["p"], seed)
    if got != want:
        raise CampaignError(f"{path}: (protocol, setting.heads, setting.p, seed) = {got}, heads.variants[{name}] "
                            f"seed {seed} is {want}")
    check_made_by(path, rec, commit, code_version)
    check_params(path, rec, variant_train_params(heads, name), f"heads.variants[{name}]")


def check_made_by(path: Path, rec: dict, commit: str, code_version: str) -> None:
    """Refuse, naming the file and key, a record not made by ``commit`` from its committed files."""
    env = rec.get("environment") or {}
    if env.get("git_commit") != commit:
        raise CampaignError(f"{path}: environment.git_commit = {env.get('git_commit')!r}, not {commit} (the commit "
                            "the checkout is at): a subset must be made by one commit, the checkout's")
    if env.get("git_dirty") is not None and env.get("git_dirty") is not False:
        raise CampaignError(f"{path}: environment.git_dirty = {env.get('git_dirty')!r}: made from a working tree with "
                            f"uncommitted changes to tracked files, not by {commit[:12]} as committed")
    if env.get("code_version") != code_version:
        raise CampaignError(f"{path}: environment.code_version = {env.get('code_version')!r}, not {code_version!r} "
                            f"(the training sources of {commit[:12]} as committed): made from a working tree with "
                            "uncommitted changes, or by other code")


def check_params(path: Path, rec: dict, want: dict, what: str) -> None:
    """Refuse a record whose params differ from ``want`` (``what`` of the checkout's config) but in FREE_PARAMS."""
    params = rec.get("params") or {}
    differs = {k: (params[k], want[k]) for k in sorted(set(params) & set(want))
               if k not in FREE_PARAMS and params[k] != want[k]}
    if differs:
        raise CampaignError(f"{path}: params differ from {what} of the checkout's config (record, config): {differs}")


def _check_table(path: Path, table: pd.DataFrame, records: dict[tuple[str, int], dict]) -> None:
    """The variants table must hold exactly the configured (variant, seed)s, each composed head's final MSE its
    record's: built from these records."""
    rows = table[(table.source == "variant") & (table.member == "head")]
    have = {(str(r.variant), int(r.seed)) for r in rows.itertuples()}
    if have != set(records):
        raise CampaignError(f"{path}: its variant rows are (variant, seed) {sorted(have)}, the configured ones "
                            f"{sorted(records)}: not the table of these records (rebuild it: snakemake heads_variants)")
    for r in rows.itertuples():
        mse = records[(str(r.variant), int(r.seed))]["mse"]
        if not math.isclose(float(r.final_test_mse), mse, rel_tol=1e-9, abs_tol=0.0):
            raise CampaignError(f"{path}: final_test_mse of ({r.variant}, seed {r.seed}, head) is {r.final_test_mse}, "
                                f"its record's mse {mse}: not the table of these records")


def import_variants(set_dir: str | Path, checkout: str | Path, config: str = DEFAULT_CONFIG) -> dict:
    """Copy a finished ``snakemake heads_variants`` run of ``checkout`` (configured by ``config``, a path inside it)
    into ``<set_dir>/variants/`` after the checks above, with its manifest; return the manifest's ``imported``."""
    from algo_emu.experiments.heads_settings import variants

    set_dir, checkout = Path(set_dir), Path(checkout).resolve()
    commit = clean_commit(set_dir, checkout)
    cfg = pinned_config(checkout, config)
    heads = cfg["heads"]
    configured = variants(heads)
    if not configured:
        raise CampaignError(f"{checkout / config}: heads.variants is empty: no variant to import")
    code_version = committed_code_version(checkout, commit)
    results = checkout / "results"
    records: dict[tuple[str, int], dict] = {}
    files: list[str] = []
    for v in configured:
        for seed in v["seeds"]:
            rel = RECORD.format(name=v["name"], seed=seed)
            path = results / rel
            if not path.is_file():
                raise CampaignError(f"{path}: missing: heads.variants[{v['name']}] seed {seed} has no record "
                                    f"(every configured variant needs every one of its seeds {v['seeds']})")
            rec = read_json(path)
            _check_record(path, rec, v, heads, seed, commit, code_version)
            records[(v["name"], seed)] = rec
            files.append(rel)
    for rel in OUTPUTS:
        if not (results / rel).is_file():
            raise CampaignError(f"{results / rel}: missing (made by `snakemake heads_variants`)")
    _check_table(results / TABLE, pd.read_csv(results / TABLE), records)
    for fig in (f for f in OUTPUTS if f.startswith("figures/")):
        if (results / fig).stat().st_mtime < (results / TABLE).stat().st_mtime:
            raise CampaignError(f"{results / fig}: older than {results / TABLE}: drawn from an earlier table")
    imported = {
        "when": utc_now(), "from_commit": commit, "code_version": code_version, "config": config,
        "config_hash": config_hash(cfg), "variants_hash": config_hash(configured),
        "by_commit": _git("rev-parse", "HEAD", cwd=REPO_ROOT, check=False) or None,
        "variants": {v["name"]: {
            "seeds": list(v["seeds"]),
            "train_seconds": round(max(sum(records[(v["name"], s)].get("timing", {}).get("epoch_seconds", []))
                                       for s in v["seeds"]), 1),
            "hardware": records[(v["name"], v["seeds"][0])]["environment"].get("hardware"),
            "device": records[(v["name"], v["seeds"][0])]["environment"].get("device"),
        } for v in configured},
    }
    install(set_dir, SUBDIR, results, [*files, *OUTPUTS], imported, KIND)
    return imported


def clean_commit(set_dir: Path, checkout: Path) -> str:
    """The commit of ``checkout``, refused unless ``set_dir`` is a campaign's set and the checkout's tracked files are
    its commit's: a subset's tables and figures are made by a commit as committed."""
    load_state(set_dir)  # a campaign's set
    if not (checkout / ".git").exists():
        raise CampaignError(f"{checkout}: not a git checkout")
    commit = _git("rev-parse", "HEAD", cwd=checkout)
    dirty = _git("status", "--porcelain", "--untracked-files=no", cwd=checkout)
    if dirty:
        files = [line.split(maxsplit=1)[-1] for line in dirty.splitlines() if line.strip()]
        raise CampaignError(f"{checkout}: tracked files differ from its commit {commit[:12]}: {files[:10]}: a "
                            "subset's tables and figures must be made by a commit as committed")
    return commit


def install(set_dir: Path, subdir: str, results: Path, rels: list[str], imported: dict, kind: str,
            extra: dict[str, Path] | None = None) -> None:
    """Copy ``rels`` (paths below ``results``), and each ``extra`` source to its name, into ``<set_dir>/<subdir>/``
    with its manifest: into a temporary folder beside it, renamed onto it at the end, so a refusal or a crash leaves
    the set as it was."""
    dest = set_dir / subdir
    tmp = set_dir / f".{subdir}.tmp-{os.getpid()}"
    old = set_dir / f".{subdir}.old-{os.getpid()}"
    for leftover in set_dir.glob(f".{subdir}.*-*"):  # from a killed import
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        for rel in rels:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(results / rel, tmp / rel)
        for name, source in (extra or {}).items():
            shutil.copy2(source, tmp / name)
        write_manifest(tmp, imported, kind)
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)


KIND = "campaign variants (ours, not paper-comparable)"


def write_manifest(vdir: Path, imported: dict, kind: str = KIND) -> dict:
    """``<vdir>/manifest.json``: every file of the subset (sha256, bytes) and what made it."""
    from algo_emu.report.manifest import file_hashes

    files = file_hashes(vdir)
    manifest = {"kind": kind, "paper_comparable": False,
                "files_root": ".", "written": utc_now(), "imported": imported, "files": files, "n_files": len(files)}
    write_json(vdir / MANIFEST, manifest)
    return manifest


# ---------------------------------------------------------------------------------------------------------
# The rules (pure: tested on synthetic tables)
# ---------------------------------------------------------------------------------------------------------

def reach(finals: list[float], paper_mse: float, paper_std: float) -> dict:
    """Rule 1 on one run's per-seed final MSEs, two-sided: ``outcome`` is "beats" when their mean is below the paper's
    mean minus :data:`REACH_STDS` standard deviations, "reaches" within the band, "does not reach" above it
    (``reaches``: the first two, the paper's value attained or passed)."""
    mean = statistics.fmean(finals)
    bound = paper_mse + REACH_STDS * paper_std
    low = paper_mse - REACH_STDS * paper_std
    outcome = "beats" if mean < low else ("reaches" if mean <= bound else "does not reach")
    return {"mean": mean, "bound": bound, "low": low, "outcome": outcome, "reaches": outcome != "does not reach",
            "n": len(finals)}


def mean_curve(curve: pd.DataFrame) -> pd.Series:
    """The seed-mean test MSE per epoch (``curve``: columns seed, epoch, test_mse), at the epochs where every seed
    was evaluated."""
    tested = curve.dropna(subset=["test_mse"])
    n = curve.seed.nunique()
    by = tested.groupby("epoch").test_mse
    counts = by.count()
    return by.mean()[counts == n].sort_index()


def late_rise(curve: pd.DataFrame) -> dict:
    """Rule 2 on one run's curve: its seed-mean final MSE (the last epoch) against the minimum of the seed-mean
    curve over the evaluated epochs; ``rise`` when the final exceeds it by more than :data:`RISE`."""
    mc = mean_curve(curve)
    if mc.empty:
        raise ValueError("late_rise: no epoch evaluated for every seed")
    final, final_epoch = float(mc.iloc[-1]), int(mc.index[-1])
    low, low_epoch = float(mc.min()), int(mc.idxmin())
    return {"final": final, "final_epoch": final_epoch, "min": low, "min_epoch": low_epoch, "excess": final / low - 1.0,
            "rise": bool(final > (1.0 + RISE) * low), "evaluated": [int(e) for e in mc.index],
            "n": int(curve.seed.nunique())}


def rise_verdict(protocol: dict | None, variant: dict | None) -> str:
    """Rule 2's answer from the protocol's and the cosine variant's :func:`late_rise`."""
    if protocol is None or variant is None:
        return "not decided (" + ("the protocol's records of this setting and seeds are not in the campaign set yet"
                                  if protocol is None else "no variant curve") + ")"
    if not protocol["rise"]:
        return (f"no late rise to explain: the protocol's final is within {RISE:.0%} of its minimum "
                f"(+{protocol['excess']:.1%})")
    if not variant["rise"]:
        return (f"the late rise is the constant lr: the protocol ends {protocol['excess']:+.1%} above its minimum, "
                f"the cosine variant {variant['excess']:+.1%} (within {RISE:.0%})")
    return (f"not the constant lr alone: the rise remains under cosine decay (protocol {protocol['excess']:+.1%}, "
            f"cosine variant {variant['excess']:+.1%}, both above {RISE:.0%})")


# ---------------------------------------------------------------------------------------------------------
# Reading the subset and the campaign's records of the same settings
# ---------------------------------------------------------------------------------------------------------

def _g(x: float) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3g}"


def _protocol_curves(paths: list[Path], seeds: list[int]) -> pd.DataFrame | None:
    """The composed head's curves (seed, epoch, test_mse) of the campaign's records of one setting, for ``seeds``;
    None when one of them is not there."""
    from algo_emu.experiments.heads_variants import _curves, _label

    recs = {}
    for p in paths:
        if p.is_file():
            rec = read_json(p)
            recs[int(rec["seed"])] = rec
    if not seeds or any(s not in recs for s in seeds):
        return None
    rows = []
    for s in seeds:
        rows += [r for r in _curves(recs[s], _label(recs[s], "protocol", "protocol")) if r["member"] == "head"]
    return pd.DataFrame(rows)[["seed", "epoch", "test_mse"]]


def _all_finals(paths: list[Path]) -> list[float]:
    return [float(read_json(p)["mse"]) for p in paths if p.is_file()]


def analyse(table: pd.DataFrame, curves: pd.DataFrame, protocol_records: dict[str, list[Path]]) -> dict:
    """Both questions' rows and answers from the variants table and curves and the campaign's done records
    (``protocol_records``: setting name, e.g. ``heads/published/H4_p60``, -> its per-seed records in the set)."""
    var = table[table.source == "variant"]
    heads_rows = var[var.member == "head"]
    q1: dict[int, dict] = {}
    q2 = []
    for name in dict.fromkeys(heads_rows.variant):
        rows = heads_rows[heads_rows.variant == name].sort_values("seed")
        first = rows.iloc[0]
        H, p, protocol = int(first.heads), int(first.p), str(first.protocol)
        seeds = [int(s) for s in rows.seed]
        setting = f"heads/{protocol}/H{H}_p{p}"
        members = var[(var.variant == name) & (var.member != "head")].groupby("member").final_test_mse.mean()
        row = {"run": name, "epochs": int(first.epochs), "lr": float(first.lr), "lr_schedule": str(first.lr_schedule),
               "seeds": seeds, "finals": [float(x) for x in rows.final_test_mse],
               "best_mean": float(rows.min_test_mse.mean()), "best_epochs": [int(e) for e in rows.best_epoch],
               "members": {m: float(members.get(m, math.nan)) for m in ("K", "Q", "V")}}
        proto_curve = _protocol_curves(protocol_records.get(setting, []), seeds)
        if not math.isnan(float(first.paper_mse)):  # the paper has a value for this setting (the table says so)
            mse, std = paper_values.paper_heads(H)
            entry = q1.setdefault(H, {"p": p, "protocol": protocol, "paper": (mse, std), "rows": [],
                                      "protocol_row": None})
            entry["rows"].append(row | reach(row["finals"], mse, std))
            if entry["protocol_row"] is None and proto_curve is not None:
                finals = [float(g.sort_values("epoch").test_mse.iloc[-1]) for _, g in proto_curve.groupby("seed")]
                best = [g.dropna().test_mse.min() for _, g in proto_curve.groupby("seed")]
                all_f = _all_finals(protocol_records.get(setting, []))
                entry["protocol_row"] = reach(finals, mse, std) | {
                    "run": f"protocol (campaign set, {setting})", "seeds": seeds, "finals": finals,
                    "best_mean": float(statistics.fmean(best)), "all_mean": statistics.fmean(all_f),
                    "all_n": len(all_f)}
        if row["lr_schedule"] == "cosine":
            vc = curves[(curves.variant == name) & (curves.source == "variant") & (curves.member == "head")]
            v_rise = late_rise(vc[["seed", "epoch", "test_mse"]]) if not vc.empty else None
            p_rise = late_rise(proto_curve) if proto_curve is not None else None
            q2.append({"run": name, "heads": H, "p": p, "protocol": protocol, "setting": setting, "seeds": seeds,
                       "variant": v_rise, "protocol_rise": p_rise, "verdict": rise_verdict(p_rise, v_rise)})
    return {"q1": q1, "q2": q2}


def q1_answer(H: int, entry: dict) -> str:
    mse, std = entry["paper"]
    reached = [r for r in entry["rows"] if r["reaches"]]
    head = f"H = {H}, the paper's {mse} ± {std}: "
    if reached:
        said = "reachable by this block and protocol: " + ", ".join(
            f"`{r['run']}` ({_g(r['mean'])}: {r['outcome']})" for r in reached)
        if any(r["outcome"] == "beats" for r in reached):
            said += (f" (beats: below the paper's band by more than {REACH_STDS:g} std, so the paper's value is not "
                     "this block's best at this setting)")
    else:
        low = min(entry["rows"], key=lambda r: r["mean"])
        said = (f"not reached by any of the {len(entry['rows'])} variant(s); the lowest seed mean is `{low['run']}`'s "
                f"{_g(low['mean'])}, above {_g(low['bound'])}")
    pr = entry["protocol_row"]
    tail = ("" if pr is None else f"; the protocol's own seeds {', '.join(map(str, pr['seeds']))}: "
            f"{_g(pr['mean'])} ({pr['outcome']} it)")
    return head + said + tail


# ---------------------------------------------------------------------------------------------------------
# The page: variants/README.md
# ---------------------------------------------------------------------------------------------------------

NOT_RUN = ("Not run yet. `snakemake --cores 2 heads_variants --configfile config/config.yaml` in a clean checkout at "
           "one commit, then `python -m tools.campaign variants --from <that checkout>` imports it into "
           "`variants/` with its own page and manifest.")


def rule1_text() -> str:
    paper = paper_values.HEADS_TABLE
    return (f"**Rule 1 (reach), stated before the numbers.** For each variant, the mean over its seeds of the composed "
            f"head's test MSE at its last epoch (the protocol's headline metric; published: the mean of per-batch "
            f"means) *reaches* the paper's value when it lies within the paper's mean ± {REACH_STDS:g} × the paper's "
            f"standard deviation over its {paper['n_seeds']} seeds ({paper['source']}); it *beats* it when it lies "
            f"below that band, and *does not reach* it above. The "
            f"paper's value is reachable by this block and protocol when at least one variant reaches or beats it, and that "
            f"variant's change (epochs, lr or schedule) is what it takes. The same rule is applied to the protocol's "
            f"own run of the same setting and seeds (the campaign's records, made at its pinned commit): the rule's "
            f"answer without the variant's change, beside it.")


def rule2_text() -> str:
    return (f"**Rule 2 (late rise), stated before the numbers.** A run's curve is the mean over its seeds of the "
            f"composed head's test MSE at each epoch evaluated for every seed (the last epoch from the final "
            f"evaluation). It *rises late* when its final value exceeds its own minimum over the evaluated epochs by "
            f"more than {RISE:.0%}. The late rise is the constant lr when the protocol's curve (the campaign's records "
            f"of the same setting and seeds) rises late and the cosine-decay variant's does not; both rising: not the "
            f"constant lr alone; the protocol's not rising: nothing to explain. A run evaluated at more epochs has its "
            f"minimum taken over more of them, which makes its no-rise test harder, not easier.")


def why_seeds(seeds: dict[str, list[int]]) -> str:
    """Why a variant has the seeds it has (``seeds``: variant -> its seeds)."""
    n = paper_values.HEADS_TABLE["n_seeds"]
    kinds = {tuple(v) for v in seeds.values()}
    said = (f"{len(next(iter(kinds)))} seeds per variant ({', '.join(map(str, next(iter(kinds))))})" if len(kinds) == 1
            else "Seeds per variant (" + "; ".join(f"`{k}`: {', '.join(map(str, v))}" for k, v in seeds.items()) + ")")
    return (f"{said}, not the paper's {n}: the diagnosis asks "
            f"whether the paper's value is reachable by this block and protocol, and what it takes, not for a {n}-seed "
            f"estimate of a variant's MSE. A variant that reaches it is a candidate for a full run, not a number "
            f"beside the paper's.")


def _q1_table(entry: dict) -> list[str]:
    out = ["| run | epochs | lr | lr schedule | final MSE per seed | seed mean | rule 1 (paper's band) | mean of per-seed "
           "minimum (epochs) | K / Q / V final, seed mean |", "|---|---|---|---|---|---|---|---|---|"]
    for r in entry["rows"]:
        out.append(f"| `{r['run']}` | {r['epochs']} | {r['lr']:g} | {r['lr_schedule']} | "
                   f"{', '.join(_g(x) for x in r['finals'])} | {_g(r['mean'])} | "
                   f"{r['outcome']} ({_g(r['low'])}-{_g(r['bound'])}) | {_g(r['best_mean'])} "
                   f"({', '.join(map(str, r['best_epochs']))}) | "
                   f"{' / '.join(_g(r['members'][m]) for m in ('K', 'Q', 'V'))} |")
    pr = entry["protocol_row"]
    if pr is not None:
        out.append(f"| {pr['run']}, seeds {', '.join(map(str, pr['seeds']))} | | | constant | "
                   f"{', '.join(_g(x) for x in pr['finals'])} | {_g(pr['mean'])} | "
                   f"{pr['outcome']} ({_g(pr['low'])}-{_g(pr['bound'])}) | {_g(pr['best_mean'])} | "
                   f"all {pr['all_n']} seeds: mean {_g(pr['all_mean'])} |")
    return out


def _q2_table(row: dict) -> list[str]:
    out = ["| run | seeds | epochs evaluated for every seed | minimum of the seed-mean curve (epoch) | final (epoch) | "
           "final / minimum − 1 | rises late (> {:.0%}) |".format(RISE), "|---|---|---|---|---|---|---|"]
    for label, lr in ((f"protocol (campaign set, {row['setting']})", row["protocol_rise"]),
                      (f"`{row['run']}`", row["variant"])):
        if lr is None:
            out.append(f"| {label} | {', '.join(map(str, row['seeds']))} | not in the set yet | | | | |")
            continue
        ev = lr["evaluated"]
        shown = ", ".join(map(str, ev)) if len(ev) <= 8 else f"{len(ev)} ({ev[0]}-{ev[-1]})"
        out.append(f"| {label} | {', '.join(map(str, row['seeds']))} | {shown} | {_g(lr['min'])} ({lr['min_epoch']}) | "
                   f"{_g(lr['final'])} ({lr['final_epoch']}) | {lr['excess']:+.1%} | {'yes' if lr['rise'] else 'no'} |")
    return out


def imported_of(vdir: Path, command: str) -> dict:
    """A subset's ``imported`` (its manifest's), refused, naming each file, when an imported file (any but the page)
    changed since its import; ``command`` imports it again."""
    from algo_emu.report.manifest import verify

    problems = [p for p in verify(vdir) if not p.startswith(f"{vdir / README}:")]
    if problems:
        raise CampaignError(f"{vdir}: the imported files changed since their import (import them again with "
                            f"`{command}`):\n" + "\n".join(problems))
    return read_json(vdir / MANIFEST)["imported"]


def write_page(vdir: Path, lines: list[str], imported: dict, kind: str = KIND) -> None:
    """A subset's ``README.md`` from ``lines``, and its manifest anew, only when the page changed."""
    readme, text = vdir / README, "\n".join(lines)
    if not readme.is_file() or readme.read_text() != text:
        write_text(readme, text)
        write_manifest(vdir, imported, kind)


def _load(vdir: Path) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    imported = imported_of(vdir, "campaign variants")
    return pd.read_csv(vdir / TABLE), pd.read_csv(vdir / CURVES), imported


def build(set_dir: Path, protocol_records: dict[str, list[Path]], page_commit: str) -> None:
    """Write ``<set>/variants/README.md`` (and its manifest anew when the page changed); nothing when the set has no
    variants (the set's page then says :data:`NOT_RUN`)."""
    vdir = Path(set_dir) / SUBDIR
    if not (vdir / TABLE).is_file():
        return
    table, curves, imported = _load(vdir)
    res = analyse(table, curves, protocol_records)
    seeds = {name: v["seeds"] for name, v in imported["variants"].items()}
    made = f"`{imported['from_commit'][:12]}` ({imported['code_version']})"

    walls = [f"`{n}`: {v['train_seconds'] / 60:.1f} min of training ({v.get('device')}, "
             f"{cpu_label(v.get('hardware'))}, {(v.get('hardware') or {}).get('cpu_count')} cores)"
             for n, v in imported["variants"].items()]
    page = [
        "# E1 variants at the paper's scale (ours, not paper-comparable)", "",
        "Diagnostic runs of ours beside the replication of arXiv 2508.17550v2, E1 (attention emulating an attention "
        "head). Each variant trains one setting of the published protocol with some training keys overridden "
        "(config `heads.variants`; what they are: `docs/experiments.md`). They are not the paper's protocol, and "
        "their numbers never replace or stand among the paper-comparable rows of [the campaign's page](../README.md).",
        "",
        f"- made by commit {made} through its own workflow (`snakemake heads_variants`, config `{imported['config']}`, "
        f"resolved config hash {imported['config_hash']}, variants hash {imported['variants_hash']}); checked at "
        f"import: every configured variant has every configured seed, every record names that commit and the "
        f"training-source digest its committed files give, and the checkout had no uncommitted changes to tracked "
        f"files",
        f"- imported {imported['when']} by commit `{(imported.get('by_commit') or '?')[:12]}`; this page built by "
        f"commit `{page_commit}`; `python -m algo_emu manifest verify <set>/{SUBDIR}` checks every file",
        f"- {why_seeds(seeds)}",
        "- the protocol's numbers beside them are the campaign's own records of the same setting and seeds (made or "
        "adopted at its pinned commit, with the protocol's epochs, constant lr and evaluation grid), read from the set",
        *[f"- {w}" for w in walls], "",
        "## Question 1: is the paper's value reachable, and what does it take?", "",
        rule1_text(), "",
    ]
    for H, e in sorted(res["q1"].items()):
        page += [f"H = {H}, p = {e['p']}, {e['protocol']} protocol; paper {e['paper'][0]} ± {e['paper'][1]}, bound "
                 f"{_g(e['paper'][0] + REACH_STDS * e['paper'][1])}:", "", *_q1_table(e), "",
                 f"Answer: {q1_answer(H, e)}.", ""]
    if not res["q1"]:
        page += ["No variant at a setting the paper reports a value for.", ""]
    page += ["## Question 2: does a decaying lr remove the late rise?", "", rule2_text(), ""]
    for r in res["q2"]:
        page += [f"H = {r['heads']}, p = {r['p']}, {r['protocol']} protocol:", "", *_q2_table(r), "",
                 f"Answer: {r['verdict']}.", ""]
    if not res["q2"]:
        page += ["No cosine-decay variant.", ""]
    page += ["## Learning curves", "",
             "Per variant: the train loss of each emulator (K, Q, V) per seed, and the composed head's test MSE per "
             "seed, with the paper's mean ± std where it reports one and, faint, the protocol's own run where the "
             "variants' run found its records.", "",
             f"![E1 variants]({FIGURE})", "",
             "## Files", "",
             f"- `{RECORD.format(name='<name>', seed='<k>')}`: the per-seed records (`variant`, `paper_comparable: "
             "false`, learning curves of every member)",
             f"- `{TABLE}` (and `.md`, `.tex`): one row per variant, seed and member (K, Q, V, and `head`, the "
             f"composed head); `{CURVES}`: the learning curves; `{FIGURE}` (and `.pdf`)",
             f"- `{MANIFEST}`: sha256 of every file and what made it; this page is rebuilt by "
             "`python -m tools.campaign page`", ""]
    write_page(vdir, page, imported)
