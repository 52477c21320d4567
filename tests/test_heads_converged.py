"""E1 at convergence (heads.convergence, heads.converged; ours, never paper-comparable): the criterion, the selection,
the refusal, rules [falls-with-H] and [converged-rate] with their negative controls, and both targets end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import yaml

from algo_emu.config import ConfigError, load_config
from algo_emu.experiments import heads_converged as hc
from algo_emu.experiments.heads_settings import candidate_train_params, variant_train_params
from algo_emu.runtime import REPO_ROOT

SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(REPO_ROOT / "Snakefile")]


def _heads(tmp_path, heads: dict) -> dict:
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"heads": heads}))
    return load_config(path, gpu_check=False)["heads"]


CANDS = [{"name": "slow", "epochs": 10}, {"name": "good", "epochs": 20, "lr_schedule": "cosine"},
         {"name": "late", "epochs": 30}]


@pytest.fixture
def params(tmp_path):
    return _heads(tmp_path, {"heads_sweep": [1, 2, 4], "convergence": {"candidates": CANDS, "seeds": [0, 1, 2]},
                             "converged": {"protocol": "good"}})


def _runs(means: dict[str, dict[str, list[float]]], seeds=(0, 1, 2), hs=(1, 2, 4)) -> pd.DataFrame:
    """Per-seed runs whose seed mean is means[candidate][budget][i] at hs[i] (seeds spread +-5 % around it)."""
    rows = []
    for name, budgets in means.items():
        for budget, values in budgets.items():
            for H, m in zip(hs, values):
                for s, f in zip(seeds, (0.95, 1.0, 1.05)):
                    rows.append({"candidate": name, "budget": budget, "heads": H, "seed": s, "mse": m * f})
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- config


def test_defaults_and_config_errors_name_the_key(tmp_path):
    heads = load_config(REPO_ROOT / "config" / "config.yaml", gpu_check=False)["heads"]
    assert [c["name"] for c in heads["convergence"]["candidates"]] == ["e150_cosine", "e150_const"]
    assert (heads["convergence"]["seeds"], heads["convergence"]["tolerance"]) == ([0, 1, 2], 0.10)
    assert heads["converged"] == {"protocol": "e150_cosine", "protocols": ["published", "independent"]}
    with pytest.raises(ConfigError, match=r"heads.converged.protocol: 'nope' is not a candidate"):
        _heads(tmp_path, {"converged": {"protocol": "nope"}})
    with pytest.raises(ConfigError, match=r"heads.convergence.candidates\[a\].name: the name 'a' is used by two"):
        _heads(tmp_path, {"convergence": {"candidates": [{"name": "a", "epochs": 1}, {"name": "a", "epochs": 2}]},
                          "converged": {"protocol": "a"}})
    with pytest.raises(ConfigError, match=r"heads.convergence.tolerance"):
        _heads(tmp_path, {"convergence": {"tolerance": 0}})


def test_a_candidate_trains_with_its_own_budget_only(params):
    x1, x2 = candidate_train_params(params, "good", "x1"), candidate_train_params(params, "good", "x2")
    assert (x1["epochs"], x2["epochs"], x1["lr_schedule"], x2["lr_schedule"], x1["lr"]) == (20, 40, "cosine", "cosine", 1e-3)
    assert "lr_schedule" not in candidate_train_params(params, "slow")  # constant: not passed (specs.OMITTED_AT)
    edited = dict(params) | {"epochs": 7, "lr": 5e-3, "lr_schedule": "cosine"}
    assert candidate_train_params(edited, "slow", "x2") == candidate_train_params(params, "slow", "x2")
    assert "target" in candidate_train_params(params, "good", "x1", "independent")
    with pytest.raises(KeyError, match="heads.convergence.candidates: no candidate named 'x'"):
        candidate_train_params(params, "x")
    assert variant_train_params(params | {"variants": [{"name": "v", "heads": 2, "p": 60, "seeds": [0], "epochs": 3}]},
                                "v")["epochs"] == 3  # the variants' path is the same function


# ----------------------------------------------------------------------------- criterion and selection


def test_criterion_holds_on_a_converged_table_and_fails_on_one_still_falling(params):
    # "good": 2E within 10 % of E at every H; "slow": still falling by 40 % at H = 4 (negative control)
    runs = _runs({"slow": {"x1": [3.0, 2.0, 10.0], "x2": [2.9, 1.9, 6.0]},
                  "good": {"x1": [1.0, 0.8, 0.5], "x2": [1.05, 0.76, 0.46]},
                  "late": {"x1": [1.0, 1.0, 1.0], "x2": [1.0, 1.0, 1.0]}})
    frame = hc.convergence_check(runs, params)
    got = {(r.candidate, r.heads): r.converges for r in frame.itertuples()}
    assert [got[("slow", H)] for H in (1, 2, 4)] == ["yes", "yes", "no"]
    assert [got[("good", H)] for H in (1, 2, 4)] == ["yes", "yes", "yes"]
    assert frame[frame.candidate == "good"].rel_change.round(6).tolist() == [0.05, -0.05, -0.08]
    # the first candidate converging everywhere is selected, not a later one that also does
    assert set(frame[frame.selected == "yes"].candidate) == {"good"}
    assert frame.groupby("candidate", sort=False).converges_everywhere.first().to_dict() == \
        {"slow": "no", "good": "yes", "late": "yes"}
    # a rise beyond the tolerance fails too (both directions)
    up = hc.convergence_check(_runs({"slow": {"x1": [1, 1, 1], "x2": [1, 1, 1.2]}, "good": {"x1": [1, 1, 1], "x2": [1, 1, 1]},
                                     "late": {"x1": [1, 1, 1], "x2": [1, 1, 1]}}), params)
    assert up[up.candidate == "slow"].converges.tolist() == ["yes", "yes", "no"]
    with pytest.raises(ValueError, match=r"no run of candidate late at x2 \(H = 4\) for seed\(s\) \[2\]"):
        hc.convergence_check(runs[~((runs.candidate == "late") & (runs.budget == "x2") & (runs.heads == 4)
                                    & (runs.seed == 2))], params)


def test_selection_and_the_refusal(params, tmp_path):
    assert hc.selected({"slow": False, "good": True, "late": True}, ["slow", "good", "late"]) == "good"
    assert hc.selected({"slow": False, "good": False}, ["slow", "good"]) is None
    converged = _runs({"slow": {"x1": [3, 2, 10], "x2": [2.9, 1.9, 6]}, "good": {"x1": [1, 1, 1], "x2": [1, 1, 1]},
                       "late": {"x1": [1, 1, 1], "x2": [1, 1, 1]}})
    table = tmp_path / "heads_convergence.csv"
    hc.convergence_check(converged, params).to_csv(table, index=False)
    assert hc.require_converged(params, str(table), str(tmp_path / "ok.json")) == "good"
    assert json.loads((tmp_path / "ok.json").read_text())["candidate"]["epochs"] == 20
    # the named candidate did not converge: refused, naming the key and the ones that did
    with pytest.raises(ValueError, match=r"heads.converged.protocol: the candidate 'slow' did not converge at H = \[4\].*"
                                         r"candidates that converged at every H: \['good', 'late'\]"):
        hc.require_converged(params | {"converged": {"protocol": "slow", "protocols": ["published"]}}, str(table),
                             str(tmp_path / "no.json"))
    assert not (tmp_path / "no.json").exists()
    # none converges: the refusal says to change the candidates
    nothing = _runs({n: {"x1": [1, 1, 1], "x2": [2, 2, 2]} for n in ("slow", "good", "late")})
    frame = hc.convergence_check(nothing, params)
    assert (frame.selected == "no").all()
    frame.to_csv(table, index=False)
    with pytest.raises(ValueError, match=r"heads.converged.protocol: .*no candidate converged at every H: change "
                                         r"heads.convergence.candidates"):
        hc.require_converged(params, str(table), str(tmp_path / "no.json"))
    # a table made for another sweep is refused too
    with pytest.raises(ValueError, match=r"heads.converged.protocol: 'good' has no convergence check at every H"):
        hc.require_converged(params | {"heads_sweep": [1, 2, 4, 8]}, str(table), str(tmp_path / "no.json"))


# ----------------------------------------------------------------------------- rule [falls-with-H]


def _seeds(means, sd=0.05, n=10, seed=0):
    rng = np.random.default_rng(seed)
    return {H: {s: m * (1 + sd * rng.standard_normal()) for s in range(n)} for H, m in means.items()}


HS = (1, 2, 4, 6, 8, 12)


def test_falls_with_h_and_its_negative_controls():
    falls = hc.falls_with_h(_seeds(dict(zip(HS, (3.0, 2.0, 1.2, 1.0, 0.8, 0.7)))))
    assert falls["verdict"] == "falls with H" and falls["diff_ci"][1] < 0 and falls["spearman_rho"] < 0
    assert falls["paired"] and "rule [falls-with-H]" in falls["numbers"]
    flat = hc.falls_with_h(_seeds(dict.fromkeys(HS, 1.0)))
    rising = hc.falls_with_h(_seeds(dict(zip(HS, (0.7, 0.8, 1.0, 1.2, 2.0, 3.0)))))
    assert flat["verdict"] == rising["verdict"] == "does not fall with H"
    assert rising["diff"] > 0 and rising["spearman_rho"] > 0
    # the ends fall but the middle does not (no rank trend): does not fall; the ends alone cannot decide
    bump = hc.falls_with_h(_seeds(dict(zip(HS, (1.0, 5.0, 5.0, 5.0, 5.0, 0.9))), sd=0.01))
    assert bump["diff_ci"][1] < 0 and bump["verdict"] == "does not fall with H"
    # too noisy to tell (the ends' interval reaches 0)
    assert hc.falls_with_h(_seeds(dict(zip(HS, (1.2, 1.15, 1.1, 1.05, 1.0, 1.0))), sd=0.5))["verdict"] == \
        "does not fall with H"
    assert hc.falls_with_h({1: [1.0, 2.0]})["verdict"] == "not testable at this scale"
    unpaired = hc.falls_with_h({1: [3.0, 3.1, 2.9], 12: {5: 1.0, 6: 1.1, 7: 0.9}, 4: [2.0, 2.1, 1.9]})
    assert not unpaired["paired"]


def _converged_files(tmp_path, means: dict[str, dict[int, float]], target_var=10.0, n_boot=200):
    """heads_converged_runs.csv and heads_converged_fit.json as converged_table writes them, from per-H means."""
    from algo_emu.fit import fit_rates

    rows, fits = [], {"candidate": {"name": "good", "epochs": 20, "lr": 1e-3, "lr_schedule": "cosine"}, "n_prompts": 50000}
    for protocol, by_h in means.items():
        values = _seeds(by_h)
        for H, per in values.items():
            rows += [{"candidate": "good", "protocol": protocol, "heads": H, "p": 60, "seed": s, "epochs": 20, "lr": 1e-3,
                      "lr_schedule": "cosine", "mse": v, "target_var": target_var} for s, v in per.items()]
        fits[protocol] = fit_rates({H: list(v.values()) for H, v in values.items()}, n_boot=n_boot)
    tables = tmp_path / "tables"
    tables.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(tables / "heads_converged_runs.csv", index=False)
    (tables / "heads_converged_fit.json").write_text(json.dumps(fits))
    return tables


def test_converged_verdict_rows_and_their_negative_controls(tmp_path):
    inverse = dict(zip(HS, (1.0 / H for H in HS)))  # MSE = 1/H exactly: falls, O(1/H) exact and as a bound
    tables = _converged_files(tmp_path / "a", {"published": inverse, "independent": dict.fromkeys(HS, 1.0)})
    rows = {(r.claim.split(",")[0] + r.claim.rsplit(",", 1)[-1], r.setting.split(",")[0]): r
            for r in hc.e1_converged_rows(tables, {})}
    assert rows[("error falls with H at convergence (ours: good)", "published")].verdict == "falls with H"
    assert rows[("error falls with H at convergence (ours: good)", "independent")].verdict == "does not fall with H"
    exact = [r for r in hc.e1_converged_rows(tables, {}) if "exact rate" in r.claim]
    assert [r.verdict for r in exact] == ["supported", "not supported"]
    assert all("rule [converged-rate]" in r.reason and "each H left out" in r.reason for r in exact)
    assert all("NOT paper-comparable" in r.scale for r in rows.values())
    # negative control: a model at Var(target) did not learn, whatever its trend
    bad = _converged_files(tmp_path / "b", {"published": inverse}, target_var=1.0)
    assert {r.verdict for r in hc.e1_converged_rows(bad, {})} == {"did not learn"}
    # absent tables: no rows (the report of `all` is unchanged)
    assert hc.e1_converged_rows(tmp_path / "none", {}) == []


# ----------------------------------------------------------------------------- both targets, end to end


def _snakemake(workdir, configfile, *args, timeout=900):
    return subprocess.run([*SNAKEMAKE, "--directory", str(workdir), "--configfile", str(configfile), "--cores", "2",
                           *args], capture_output=True, text=True, timeout=timeout)


def test_both_targets_end_to_end_and_the_refusal(tmp_path):
    """heads_convergence then heads_converged on a cut tiny config (H = 1, 2; one candidate; the published protocol):
    tables, fit, verdicts and figure; then a tolerance no candidate meets: heads_converged refuses before training."""
    config = yaml.safe_load((REPO_ROOT / "tests" / "tiny.yaml").read_text())
    config["heads"] |= {"heads_sweep": [1, 2],
                        "convergence": {"candidates": [{"name": "e1_cos", "epochs": 1, "lr_schedule": "cosine"}],
                                        "seeds": [0], "tolerance": 100.0},
                        "converged": {"protocol": "e1_cos", "protocols": ["published"]}}
    configfile = tmp_path / "config.yaml"
    configfile.write_text(yaml.safe_dump(config))
    proc = _snakemake(tmp_path, configfile, "heads_converged")
    assert proc.returncode == 0, proc.stderr[-4000:]
    conv = pd.read_csv(tmp_path / "results" / "tables" / "heads_convergence.csv")
    assert list(conv.columns) == hc.CONVERGENCE_COLUMNS and len(conv) == 2 and (conv.selected == "yes").all()
    md = (tmp_path / "results" / "tables" / "heads_convergence.md").read_text()
    assert md.index("Convergence criterion") < md.index("| candidate") and "Selected protocol: e1_cos" in md
    table = pd.read_csv(tmp_path / "results" / "tables" / "heads_converged.csv")
    assert list(table.columns) == hc.CONVERGED_COLUMNS
    assert table[["protocol", "heads", "n_seeds"]].values.tolist() == [["published", 1, 2], ["published", 2, 2]]
    page = (tmp_path / "results" / "tables" / "heads_converged.md").read_text()
    assert page.index("Convergence criterion") < page.index("[falls-with-H]") < page.index("| candidate") < \
        page.index("Verdicts:")
    assert "NOT paper-comparable" in page and "error falls with H, at convergence" in page
    fit = json.loads((tmp_path / "results" / "tables" / "heads_converged_fit.json").read_text())
    assert fit["candidate"]["name"] == "e1_cos" and "falls_with_h" in fit["published"]
    assert (tmp_path / "results" / "figures" / "heads_converged.png").stat().st_size > 10_000
    rec = json.loads((tmp_path / "results" / "heads" / "converged" / "e1_cos" / "published" / "runs" / "H2_p8" / "seed1"
                      / "metrics.json").read_text())
    assert (rec["variant"], rec["paper_comparable"], rec["params"]["epochs"], rec["params"]["lr_schedule"]) == \
        ("converged-e1_cos", False, 1, "cosine")
    rec = json.loads((tmp_path / "results" / "heads" / "convergence" / "e1_cos" / "x2" / "H1_p8" / "seed0"
                      / "metrics.json").read_text())
    assert (rec["variant"], rec["params"]["epochs"]) == ("convergence-e1_cos-x2", 2)
    # a tolerance no run meets: the check reruns and refuses; nothing is trained again
    config["heads"]["convergence"]["tolerance"] = 1e-12
    configfile.write_text(yaml.safe_dump(config))
    proc = _snakemake(tmp_path, configfile, "heads_converged")
    assert proc.returncode != 0
    assert "heads.converged.protocol: the candidate 'e1_cos' did not converge" in proc.stderr
    assert "rule heads_converged_train" not in proc.stdout + proc.stderr
    assert "rule heads_convergence_train" not in proc.stdout + proc.stderr


def test_all_on_the_default_config_plans_neither_target(tmp_path):
    proc = _snakemake(tmp_path, REPO_ROOT / "config" / "config.yaml", "-n", "all", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    stats = out[out.index("Job stats"):out.index("\ntotal")]
    assert "heads_conver" not in stats and "heads_train" in stats


def test_the_converged_table_refuses_records_of_another_budget_or_label(params, tmp_path):
    rec = {"variant": "converged-good", "paper_comparable": False, "protocol": "published", "setting": {"heads": 1, "p": 60},
           "seed": 0, "mse": 1.0, "target": "reference_code", "metric": "batchmean",
           "target_var_by_target": {"reference_code": 10.0},
           "params": {"epochs": 20, "lr": 0.001, "lr_schedule": "cosine", "n_prompts": 50000}}
    path = tmp_path / "m.json"
    path.write_text(json.dumps(rec))
    assert hc.load_converged_runs(params, [str(path)]).mse.tolist() == [1.0]
    path.write_text(json.dumps(rec | {"params": rec["params"] | {"lr": 0.01}}))  # trained before the candidate's edit
    with pytest.raises(ValueError, match=r"m.json: trained with \(epochs, lr, lr_schedule\) = \(20, 0.01, 'cosine'\), "
                                         r"not heads.convergence.candidates\[good\]'s"):
        hc.load_converged_runs(params, [str(path)])
    path.write_text(json.dumps(rec | {"variant": "H4_cosine"}))  # a variant's record
    with pytest.raises(ValueError, match=r"not a record of 'converged-good'"):
        hc.load_converged_runs(params, [str(path)])
