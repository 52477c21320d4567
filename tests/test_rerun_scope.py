"""A config edit reruns only what it changes (algo_emu.specs).

A finished tiny run is faked cheaply: Snakemake's own dry run lists every job's outputs, the test creates
them, and a forced ``touch`` run records each job's metadata (its params), as a real run would. Then each
key of every experiment section of ``tests/tiny.yaml`` is edited in turn (the first edit that still
validates) and a dry run of ``all``, through Snakemake's Python API in this process, must rerun every job
whose step reads that key (plus the report and the manifest, which take the whole config) and no job for
params it does not read; the other reruns are their downstream jobs (and the new jobs of a longer sweep). Three edits are spelled out: a new H
trains that H alone (one setting per protocol in E1, per mode in E3) and no data set; ``heads.eval_every``
retrains every heads setting and touches no data job.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
from pathlib import Path

import pytest
import yaml

from algo_emu.config import ConfigError, SCHEMA_DIR, load_schema, validate_sections
from algo_emu.specs import reads
from algo_emu.runtime import REPO_ROOT

snakemake_api = pytest.importorskip("snakemake.api")

TINY = REPO_ROOT / "tests" / "tiny.yaml"
SECTIONS = ("heads", "theorem31", "statistical", "ames", "constructions", "essay")
#: rule -> (section, step, variant): a wildcard's name, or "=<value>" for a fixed variant
RULE_STEPS = {
    "heads_data": ("heads", "data", None),
    "heads_data_published": ("heads", "data", None),
    "heads_train": ("heads", "train", "protocol"),
    "heads_aggregate": ("heads", "aggregate", None),
    "heads_fit": ("heads", "fit", None),
    "theorem31_train": ("theorem31", "train", None),
    "theorem31_train_blind": ("theorem31", "train", None),
    "theorem31_aggregate": ("theorem31", "aggregate", None),
    "statistical_data": ("statistical", "data", None),
    "statistical_train": ("statistical", "train", None),
    "statistical_train_blind": ("statistical", "train", None),
    "statistical_evaluate": ("statistical", "evaluate", None),
    "statistical_aggregate": ("statistical", "aggregate", None),
    "download_ames": ("ames", "download", None),
    "ames_prepare": ("ames", "prepare", None),
    "ames_fit": ("ames", "fit", "ames_mode"),
    "ames_train": ("ames", "train", None),
    "ames_train_blind": ("ames", "train", None),
    "construction_table": ("constructions", "table", "ckind"),
    "construction_figure": ("constructions", "figure", None),
    "essay_equivalences": ("essay", "equivalences", None),
    "essay_train": ("essay", "train", "evariant"),
    "essay_evaluate": ("essay", "evaluate", None),
    "essay_aggregate": ("essay", "claims", None),
    "essay_icl_figure": ("essay", "figure", "=icl"),
    "essay_equivalences_figure": ("essay", "figure", "=equivalences"),
}
#: rules that take the whole config (the replication report's scale column, the manifest's config hash)
WHOLE_CONFIG = {"replication", "manifest"}
#: keys a rule takes as a params entry of its own, not through `params` of its job: the essay's seeds (all of them in one job)
OWN_PARAMS = {("essay", "seeds"): {"essay_equivalences"}}


class _Jobs(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.jobs: list[tuple[str, tuple, str, list]] = []

    def emit(self, record: logging.LogRecord) -> None:
        from snakemake_interface_logger_plugins.common import LogEvent

        if getattr(record, "event", None) == LogEvent.JOB_INFO:
            self.jobs.append((record.rule_name, tuple(sorted(record.wildcards.items())), str(record.reason),
                              list(record.output)))


def _plan(workdir: Path, configfile: Path, mode: str, force: bool = False,
          targets: tuple[str, ...] = ("all",)) -> list[tuple[str, tuple, str, list]]:
    """The jobs Snakemake would run for ``targets`` (``mode`` dryrun), or runs by touching outputs (touch)."""
    from snakemake.settings.types import ConfigSettings, DAGSettings, OutputSettings, Quietness, ResourceSettings

    handler, log = _Jobs(), logging.getLogger("snakemake.logging")
    cwd = os.getcwd()
    try:
        with snakemake_api.SnakemakeApi(OutputSettings(dryrun=mode == "dryrun", quiet={Quietness.ALL})) as api:
            log.addHandler(handler)
            workflow = api.workflow(resource_settings=ResourceSettings(cores=1),
                                    config_settings=ConfigSettings(configfiles=[configfile]),
                                    snakefile=REPO_ROOT / "Snakefile", workdir=workdir)
            workflow.dag(DAGSettings(targets=set(targets), forceall=force)).execute_workflow(
                executor="local", pseudo_executor=mode)
    finally:
        log.removeHandler(handler)
        os.chdir(cwd)
    return handler.jobs


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A workdir where the tiny run looks finished: every output present, every job's metadata recorded."""
    workdir = tmp_path_factory.mktemp("rerun")
    configfile = workdir / "config.yaml"  # one path for every edit: the report's params name the config file
    shutil.copy(TINY, configfile)
    return workdir, configfile, _fake_finished(workdir, configfile)


def _fake_finished(workdir: Path, configfile: Path, targets: tuple = ("all",), dir_rules: tuple = ()) -> list:
    """Create every output of ``targets`` (a directory for the rules in ``dir_rules``, whose output is one) and
    record every job's metadata (a forced touch run); the planned jobs."""
    jobs = _plan(workdir, configfile, "dryrun", targets=targets)
    for rule, _wc, _reason, outputs in jobs:
        for f in outputs:
            if rule in dir_rules:
                (workdir / f).mkdir(parents=True, exist_ok=True)
            else:
                (workdir / f).parent.mkdir(parents=True, exist_ok=True)
                (workdir / f).touch()
    _plan(workdir, configfile, "touch", force=True, targets=targets)
    assert _plan(workdir, configfile, "dryrun", targets=targets) == [], "the faked run is not finished"
    return jobs


def _rerun(finished, config: dict) -> list[tuple[str, dict, str]]:
    workdir, configfile, _ = finished
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        return [(rule, dict(wc), reason) for rule, wc, reason, _ in _plan(workdir, configfile, "dryrun")]
    finally:
        shutil.copy(TINY, configfile)


def _valid(config: dict) -> bool:
    try:
        validate_sections(copy.deepcopy(config), gpu_check=False)
    except (ConfigError, ValueError, TypeError, KeyError):
        return False
    return True


def _candidates(value, schema: dict):
    """Edits of one value, most natural first."""
    if isinstance(value, bool):
        yield not value
    elif isinstance(value, int):
        yield from (value * 2, value + 1, value - 1, max(1, value // 2))
    elif isinstance(value, float):
        yield from (value * 2, value / 2)
    elif isinstance(value, str):
        yield from [e for e in schema.get("enum", []) if e != value] + ["auto", "openml", value + "x"]
    elif isinstance(value, list):
        ints = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
        if ints and len(ints) == len(value):
            yield from (value + [v] for v in range(1, 200) if v not in value)
        elif value and all(isinstance(v, (int, float)) for v in value):
            yield value + [max(value) * 2]
        items = schema.get("items", {})
        yield from (value + [e] for e in items.get("enum", []) if e not in value)
        if len(value) > 1:
            yield value[:-1]
    elif isinstance(value, dict):
        props = schema.get("properties", {})
        for key, sub in value.items():
            for edit in _candidates(sub, props.get(key, {})):
                yield {**value, key: edit}


def _edit(base: dict, section: str, key: str) -> dict:
    schema = load_schema(SCHEMA_DIR / f"{section}.schema.yaml")["properties"].get(key, {})
    for value in _candidates(base[section][key], schema):
        config = copy.deepcopy(base)
        config[section][key] = value
        if _valid(config):
            return config
    raise AssertionError(f"no valid edit of {section}.{key} found")


def _expected(jobs, section: str, key: str) -> set[tuple[str, tuple]]:
    out = set()
    for rule, wc, _reason, _outputs in jobs:
        if rule in WHOLE_CONFIG or rule in OWN_PARAMS.get((section, key), ()):
            out.add((rule, wc))
            continue
        if rule not in RULE_STEPS:
            continue
        sec, step, variant = RULE_STEPS[rule]
        value = variant[1:] if variant and variant.startswith("=") else dict(wc)[variant] if variant else None
        if sec == section and key in reads(sec, step).for_variant(value):
            out.add((rule, wc))
    return out


EDITS = [(section, key) for section in SECTIONS for key in yaml.safe_load(TINY.read_text())[section]]


def test_every_rule_with_config_params_is_declared(finished):
    rules = {rule for rule, *_ in finished[2]}
    assert set(RULE_STEPS) <= rules
    assert rules - set(RULE_STEPS) - WHOLE_CONFIG <= {
        "all", "theorem31_figure", "theorem31_ablation_figure", "statistical_heads_figure", "statistical_ablation_figure",
        "heads_vs_mse_figure", "prompt_length_vs_mse_figure", "ames_evaluate", "ames_aggregate", "ames_figure"}


def test_each_key_reruns_exactly_the_jobs_that_read_it(finished):
    base = yaml.safe_load(TINY.read_text())
    wrong = []
    for section, key in EDITS:
        jobs = _rerun(finished, _edit(base, section, key))
        rerun = {(rule, tuple(sorted(wc.items()))) for rule, wc, _ in jobs}
        # A job whose input is rerun is listed for that reason, not for its params: so the jobs rerun for their
        # params must read the key, and every job that reads it must rerun (for its params or its inputs).
        changed = {(rule, tuple(sorted(wc.items()))) for rule, wc, reason in jobs if "params have changed" in reason.lower()}
        expected = _expected(finished[2], section, key)
        if not changed <= expected or not expected <= rerun:
            wrong.append(f"{section}.{key}: rerun for params it does not read {sorted(changed - expected)}; "
                         f"reads it but not rerun {sorted(expected - rerun)}")
    assert not wrong, "\n".join(wrong)


def test_a_new_h_trains_only_that_h(finished):
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["heads_sweep"] = config["heads"]["heads_sweep"] + [3]
    jobs = _rerun(finished, config)
    train = sorted((wc["protocol"], wc["heads"], wc["p"]) for rule, wc, _ in jobs if rule == "heads_train")
    assert train == [("independent", "3", "8"), ("published", "3", "8")]
    assert not [rule for rule, *_ in jobs if rule.startswith(("heads_data", "theorem31", "statistical", "ames", "essay"))]


def test_a_new_statistical_h_trains_only_that_h_on_the_data_sets_already_made(finished):
    config = yaml.safe_load(TINY.read_text())
    config["statistical"]["heads_sweep"] = config["statistical"]["heads_sweep"] + [3]
    jobs = _rerun(finished, config)
    new = sorted((rule, wc["stat_mode"]) for rule, wc, _ in jobs if rule.startswith("statistical_") and "heads" in wc)
    assert all(wc["heads"] == "3" for rule, wc, _ in jobs if "heads" in wc and rule.startswith("statistical_"))
    assert new == sorted((rule, mode) for rule in ("statistical_train", "statistical_train_blind", "statistical_evaluate")
                         for mode in ("fitted", "reference_code"))
    assert not [rule for rule, *_ in jobs if rule == "statistical_data" or rule.startswith(("heads", "theorem31"))]


def test_eval_every_retrains_but_touches_no_data_job(finished):
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["eval_every"] = 1
    jobs = _rerun(finished, config)
    rules = [rule for rule, *_ in jobs]
    assert rules.count("heads_train") == 7 and not [r for r in rules if "data" in r]


# ----------------------------------------------------------------------------- shape groups (`grouping: true`, a GPU's jobs)


@pytest.fixture(scope="module")
def finished_grouped(tmp_path_factory):
    """The tiny run with ``grouping: true`` (what ``auto`` is on a GPU), finished."""
    workdir = tmp_path_factory.mktemp("rerun_grouped")
    configfile = workdir / "config.yaml"
    config = yaml.safe_load(TINY.read_text()) | {"grouping": True}
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    return workdir, configfile, config, _fake_finished(workdir, configfile)


def test_grouped_jobs_replace_the_per_setting_training_jobs(finished_grouped):
    """One E1 job per (H, p) holding both protocols where both have that setting, one E2 job per p and one E3 job
    per (mode, H) holding the model and its weight-blind baseline; no per-setting training job."""
    rules = [rule for rule, *_ in finished_grouped[3]]
    assert sorted(r for r in rules if r.startswith("heads_train")) == [
        "heads_train_group_H1_p4", "heads_train_group_H1_p8", "heads_train_group_H2_p8", "heads_train_group_H4_p8"]
    assert rules.count("theorem31_train_group") == 2 and rules.count("statistical_train_group") == 4
    assert not {"heads_train", "theorem31_train", "theorem31_train_blind", "statistical_train", "statistical_train_blind"} & set(rules)
    outputs = {rule: out for rule, _wc, _reason, out in finished_grouped[3]}
    assert sorted(outputs["heads_train_group_H2_p8"]) == sorted(
        f"results/heads/{protocol}/runs/H2_p8/{f}" for protocol in ("published", "independent")
        for f in ("seed0/metrics.json", "seed1/metrics.json", "model.pt"))
    assert {o.split("/runs/")[0] for o in outputs["heads_train_group_H1_p4"]} == {"results/heads/published"}


def test_grouped_a_new_h_adds_its_own_group_only(finished_grouped):
    workdir, configfile, config, _ = finished_grouped
    edited = copy.deepcopy(config)
    edited["heads"]["heads_sweep"] = edited["heads"]["heads_sweep"] + [3]
    configfile.write_text(yaml.safe_dump(edited, sort_keys=False))
    try:
        jobs = [rule for rule, *_ in _plan(workdir, configfile, "dryrun")]
    finally:
        configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    assert [r for r in jobs if r.startswith("heads_train")] == ["heads_train_group_H3_p8"]
    assert not [r for r in jobs if r.startswith(("heads_data", "theorem31", "statistical", "ames", "essay"))]


# ----------------------------------------------------------------------------- E1 variants (`snakemake heads_variants`)

VARIANT_TARGETS = ("all", "heads_variants")


@pytest.fixture(scope="module")
def finished_variants(tmp_path_factory):
    """A workdir where the tiny run and its variants look finished (a variant's records are a directory)."""
    workdir = tmp_path_factory.mktemp("rerun_variants")
    configfile = workdir / "config.yaml"
    shutil.copy(TINY, configfile)
    return workdir, configfile, _fake_finished(workdir, configfile, VARIANT_TARGETS, ("heads_variant_train",))


def _rerun_variants(finished, config: dict) -> list[tuple[str, dict, str]]:
    workdir, configfile, _ = finished
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        return [(rule, dict(wc), reason)
                for rule, wc, reason, _ in _plan(workdir, configfile, "dryrun", targets=VARIANT_TARGETS)]
    finally:
        shutil.copy(TINY, configfile)


def _trained(jobs) -> list[tuple[str, str]]:
    return sorted((rule, wc.get("variant") or f"{wc['protocol']} H{wc['heads']} p{wc['p']}") for rule, wc, _ in jobs
                  if rule in ("heads_train", "heads_variant_train"))


def test_variants_are_not_part_of_all_and_a_new_variant_trains_only_itself(finished, finished_variants):
    assert not [rule for rule, *_ in finished[2] if "variant" in rule]
    assert sorted(dict(wc)["variant"] for rule, wc, *_ in finished_variants[2] if rule == "heads_variant_train") == \
        ["H1_cosine", "H4_epochs4"]
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["variants"].append({"name": "H2_lr", "heads": 2, "p": 8, "seeds": [1], "lr": 0.01})
    jobs = _rerun_variants(finished_variants, config)
    assert _trained(jobs) == [("heads_variant_train", "H2_lr")]
    # the rest is the variants' table and figure, and the rules that take the whole config
    assert sorted({rule for rule, *_ in jobs} - {"heads_variant_train"}) == [
        "all", "heads_variants", "heads_variants_figure", "heads_variants_table", "manifest", "replication"]


def test_a_sweep_edit_retrains_only_the_variants_that_read_the_key(finished_variants):
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["heads_sweep"] = config["heads"]["heads_sweep"] + [3]
    assert [t for t in _trained(_rerun_variants(finished_variants, config)) if t[0] == "heads_variant_train"] == []
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["epochs"] = 3  # H4_epochs4 has its own epochs; H1_cosine reads the section's
    trained = _trained(_rerun_variants(finished_variants, config))
    assert [t for t in trained if t[0] == "heads_variant_train"] == [("heads_variant_train", "H1_cosine")]
    assert len([t for t in trained if t[0] == "heads_train"]) == 7
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["variants"][0]["epochs"] = 5  # a variant's own edit: that variant alone
    assert _trained(_rerun_variants(finished_variants, config)) == [("heads_variant_train", "H4_epochs4")]


# ----------------------------------------------------------------------------- E1 at convergence (`snakemake heads_convergence heads_converged`)

CONVERGED_TARGETS = ("all", "heads_convergence", "heads_converged")


@pytest.fixture(scope="module")
def finished_converged(tmp_path_factory):
    """A workdir where the tiny run, its convergence check and its converged table look finished."""
    workdir = tmp_path_factory.mktemp("rerun_converged")
    configfile = workdir / "config.yaml"
    shutil.copy(TINY, configfile)
    return workdir, configfile, _fake_finished(workdir, configfile, CONVERGED_TARGETS)


def _trained_converged(finished, config: dict) -> list[tuple]:
    workdir, configfile, _ = finished
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        jobs = _plan(workdir, configfile, "dryrun", targets=CONVERGED_TARGETS)
    finally:
        shutil.copy(TINY, configfile)
    return sorted((rule, tuple(sorted(dict(wc).items()))) for rule, wc, _, _ in jobs
                  if rule in ("heads_train", "heads_convergence_train", "heads_converged_train"))


def test_convergence_runs_are_not_part_of_all_and_train_with_their_own_budget(finished, finished_converged):
    assert not [rule for rule, *_ in finished[2] if "conver" in rule]
    planned = [rule for rule, *_ in finished_converged[2]]
    # tiny: 2 candidates x (E, 2E) x 3 H; the converged candidate x 3 H x 2 protocols
    assert planned.count("heads_convergence_train") == 12 and planned.count("heads_converged_train") == 6
    config = yaml.safe_load(TINY.read_text())
    config["heads"] |= {"epochs": 3, "lr": 0.01}  # the sweep's budget: none of the candidates' runs
    trained = _trained_converged(finished_converged, config)
    assert {rule for rule, _ in trained} == {"heads_train"} and len(trained) == 7
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["convergence"]["candidates"][1]["epochs"] = 3  # e2_const: its own check only
    trained = _trained_converged(finished_converged, config)
    assert {rule for rule, _ in trained} == {"heads_convergence_train"} and len(trained) == 6
    assert {dict(wc)["candidate"] for _, wc in trained} == {"e2_const"}
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["convergence"]["tolerance"] = 0.2  # a new criterion: the tables and the check, no training
    assert _trained_converged(finished_converged, config) == []


def test_an_edit_of_the_converged_candidate_retrains_its_runs_on_the_next_invocation(finished_converged):
    """Editing the converged candidate itself retrains its convergence runs at once; its converged runs are planned by
    the invocation after the check has rerun (Snakemake 9 does not recheck the params of jobs below a job that reruns
    when their only link to it is ancient, here the check). heads_converged_table refuses records trained with
    another budget meanwhile (tests/test_heads_converged.py)."""
    workdir, configfile, _ = finished_converged
    config = yaml.safe_load(TINY.read_text())
    config["heads"]["convergence"]["candidates"][0]["lr"] = 0.01  # e2_cosine, heads.converged.protocol
    trained = _trained_converged(finished_converged, config)
    assert [sum(r == rule for r, _ in trained) for rule in ("heads_convergence_train", "heads_converged_train")] == [6, 0]
    configfile.write_text(yaml.safe_dump(config, sort_keys=False))
    try:
        _plan(workdir, configfile, "touch", targets=CONVERGED_TARGETS)  # the first invocation, finished
        trained = _trained_converged(finished_converged, config)
    finally:
        shutil.copy(TINY, configfile)
    assert {rule for rule, _ in trained} == {"heads_converged_train"} and len(trained) == 6
