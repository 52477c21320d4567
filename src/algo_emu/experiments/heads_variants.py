"""E1 variants (``heads.variants``): diagnostic runs of our own beside the sweeps, never paper-comparable.

A variant trains one setting (protocol, H, p) for its own seeds through the heads ``train`` step with some of the
section's training keys overridden (epochs, lr, lr_schedule, eval_every;
:func:`algo_emu.experiments.heads_settings.variant_train_params`). This module turns its records into

* ``heads_variants.csv``: one row per (variant, seed, member), member = K, Q, V (the emulators) or ``head`` (the
  composed head, the protocol's headline quantity): final test MSE, best evaluated epoch and the minimum test MSE
  there, train loss at a few epochs and its relative drop over the last tenth of training;
* ``heads_variants_curves.csv``: the learning curves behind it (train loss per epoch per emulator, test MSE at every
  evaluated epoch), which the figure draws.

Beside each variant, when its records exist, the protocol's own run of the same setting and seeds (a record of the
sweep, under ``<root>/<protocol>/runs/H<H>_p<p>/`` of a baseline root, with the variant's parameters except the
overridden ones) is put in both tables as ``source = protocol``; the paper's value stands beside the composed head's
rows of the published protocol only, at the heads sweep's p.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from algo_emu import paper_values
from algo_emu.specs import OMITTED_AT
from algo_emu.experiments.heads_settings import VARIANT_OVERRIDES, setting_name, variant_protocol, variants
from algo_emu.io import read_json, write_csv
from algo_emu.tables import write_table

ROLES = ("K", "Q", "V")
MEMBERS = (*ROLES, "head")
#: Epochs whose train loss the table reports (those a run reached), besides the last.
LOSS_EPOCHS = (1, 10, 25, 50, 100, 150)
#: Parameters that may differ between a variant and the protocol run drawn beside it (besides its overrides):
#: the attention implementation is the same mathematics (tested), resolved per machine.
_FREE = ("attention",)
SETTING = ["variant", "source", "paper_comparable", "protocol", "heads", "p", "epochs", "lr", "lr_schedule", "seed",
           "member"]
CURVE_COLUMNS = [*SETTING, "epoch", "lr_epoch", "train_loss", "test_mse"]


# --- captions: the text above this experiment's tables (.md) and in their .tex

def caption(params: dict, names: str) -> str:
    return (
        f"E1 variants (ours, not paper-comparable: heads.variants; {names}). Per variant, seed and member (K/Q/V: an "
        "emulator, its test MSE against its projection; head: the composed head, the protocol's headline quantity): "
        "the final test MSE, the minimum over the evaluated epochs and its epoch, the train loss at the listed epochs "
        "and its relative fall over the last tenth of the epochs. Rows with source = protocol are the protocol's own "
        "run of the same setting and seed, where its records exist. paper_mse: the paper's value for that H, beside "
        f"the composed head of the published protocol at p = {params['p_heads_sweep']} only "
        f"({paper_values.HEADS_TABLE['source']}).")


def _records(directory: str | Path) -> dict[int, tuple[str, dict]]:
    out = {}
    for path in sorted(Path(directory).glob("seed*/metrics.json")):
        rec = read_json(path)
        out[int(rec["seed"])] = (str(path), rec)
    return out


def _label(rec: dict, name: str, source: str) -> dict:
    prm = rec["params"]
    return {"variant": name, "source": source, "paper_comparable": bool(rec.get("paper_comparable", rec["protocol"] == "published")),
            "protocol": rec["protocol"], "heads": rec["setting"]["heads"], "p": rec["setting"]["p"],
            "epochs": prm["epochs"], "lr": prm["lr"], "lr_schedule": prm.get("lr_schedule", OMITTED_AT["lr_schedule"]),
            "seed": rec["seed"]}


def _curves(rec: dict, label: dict) -> list[dict]:
    """Tidy learning curves of one record: every epoch's train loss per emulator, the test MSE where evaluated
    (the last epoch's from the final evaluation)."""
    rows = []
    last = rec["history"][-1]["epoch"] if rec["history"] else 0
    for h in rec["history"]:
        e = h["epoch"]
        final = e == last
        member_test = rec["member_mse"] if final else h.get("test_member_mse", {})
        for r in ROLES:
            rows.append(label | {"member": r, "epoch": e, "lr_epoch": h.get("lr", label["lr"]),
                                 "train_loss": h["train_loss"][r], "test_mse": member_test.get(r, math.nan)})
        head = rec["mse"] if final else h.get("test_mse", math.nan)
        rows.append(label | {"member": "head", "epoch": e, "lr_epoch": h.get("lr", label["lr"]), "train_loss": math.nan,
                             "test_mse": head})
    return rows


def _summary(curves: pd.DataFrame, loss_epochs: list[int], paper: tuple[float, float]) -> dict:
    """One table row from one (record, member)'s curve rows."""
    first = curves.iloc[0]
    row = {k: first[k] for k in SETTING}
    tested = curves.dropna(subset=["test_mse"])
    row["final_test_mse"] = float(curves.test_mse.iloc[-1])
    if tested.empty:
        row |= {"min_test_mse": math.nan, "best_epoch": math.nan, "evaluations": 0}
    else:
        best = tested.loc[tested.test_mse.idxmin()]
        row |= {"min_test_mse": float(best.test_mse), "best_epoch": int(best.epoch), "evaluations": len(tested)}
    loss = curves.set_index("epoch").train_loss
    for e in loss_epochs:
        row[f"train_loss_e{e}"] = float(loss.get(e, math.nan))
    row["train_loss_final"] = float(loss.iloc[-1])
    # relative fall of the train loss over the last tenth of the epochs: > 0 while it is still falling
    last = int(curves.epoch.iloc[-1])
    ref = max(1, last - max(1, last // 10))
    row["train_loss_drop_last_tenth"] = (float((loss.get(ref) - loss.iloc[-1]) / loss.get(ref))
                                         if ref < last and ref in loss.index else math.nan)
    row["paper_mse"], row["paper_std"] = paper if first.member == "head" else (math.nan, math.nan)
    return row


def _baseline(roots: list[str], rec: dict, override_keys: set[str]) -> tuple[str, dict] | None:
    """The protocol's own record of ``rec``'s setting and seed under the first root holding one made with ``rec``'s
    parameters except the variant's overrides (and the attention implementation), or None."""
    for root in roots:
        path = Path(root) / rec["protocol"] / "runs" / setting_name(rec["setting"]["heads"], rec["setting"]["p"]) / \
            f"seed{rec['seed']}" / "metrics.json"
        if not path.exists():
            continue
        base = read_json(path)
        if "variant" in base:
            continue
        skip = override_keys | set(_FREE) | {"lr_schedule"}
        a = {k: v for k, v in rec["params"].items() if k not in skip}
        b = {k: v for k, v in base["params"].items() if k not in skip}
        if a == b:
            return str(path), base
    return None


def variants_table(params: dict, variant_dirs: list[str], table: str, curves_csv: str,
                   baseline_roots: list[str] | None = None) -> pd.DataFrame:
    """The variants' table and learning curves (heads.variants: ours, never paper-comparable).

    ``heads_variants.csv`` (+ .md, .tex) and ``heads_variants_curves.csv`` from the variants' records (every
    configured variant, every one of its seeds: a missing one is an error naming it) and, where they exist, the
    protocol's records of the same settings and seeds under ``baseline_roots``."""
    by_name = {Path(d).name: d for d in variant_dirs}
    curve_rows: list[dict] = []
    seen_baselines: set[str] = set()
    configured = variants(params)
    for v in configured:
        name = v["name"]
        if name not in by_name:
            raise ValueError(f"heads.variants[{name}]: no records directory given (variant_dirs {variant_dirs})")
        recs = _records(by_name[name])
        missing = sorted(set(v["seeds"]) - set(recs))
        if missing:
            raise ValueError(f"heads.variants[{name}]: no record of seed(s) {missing} under {by_name[name]}")
        for seed in v["seeds"]:
            path, rec = recs[seed]
            if rec.get("variant") != name or rec.get("paper_comparable") is not False:
                raise ValueError(f"{path}: not a record of the variant {name!r} (variant={rec.get('variant')!r}, "
                                 f"paper_comparable={rec.get('paper_comparable')!r})")
            if (rec["protocol"], rec["setting"]["heads"], rec["setting"]["p"]) != (variant_protocol(v), v["heads"], v["p"]):
                raise ValueError(f"{path}: setting {rec['protocol']} H={rec['setting']['heads']} p={rec['setting']['p']}"
                                 f" is not heads.variants[{name}]'s")
            curve_rows += _curves(rec, _label(rec, name, "variant"))
            base = _baseline(list(baseline_roots or []), rec, {k for k in VARIANT_OVERRIDES if k in v})
            if base is not None and base[0] not in seen_baselines:
                seen_baselines.add(base[0])
                b = base[1]
                curve_rows += _curves(b, _label(b, f"protocol {b['protocol']} {setting_name(b['setting']['heads'], b['setting']['p'])}",
                                                "protocol"))
    curves = pd.DataFrame(curve_rows, columns=CURVE_COLUMNS)
    max_epoch = int(curves.epoch.max()) if not curves.empty else 0
    loss_epochs = [e for e in LOSS_EPOCHS if e <= max_epoch]
    rows = []
    for _, g in curves.groupby(["variant", "seed", "member"], sort=False):
        first = g.iloc[0]
        comparable = first.protocol == "published" and first.p == params["p_heads_sweep"]
        rows.append(_summary(g.sort_values("epoch"), loss_epochs,
                             paper_values.paper_heads(int(first.heads)) if comparable else (math.nan, math.nan)))
    columns = [*SETTING, "final_test_mse", "min_test_mse", "best_epoch", "evaluations",
               *[f"train_loss_e{e}" for e in loss_epochs], "train_loss_final", "train_loss_drop_last_tenth",
               "paper_mse", "paper_std"]
    frame = pd.DataFrame(rows, columns=columns)
    write_csv(curves_csv, curves)
    names = ", ".join(v["name"] for v in configured) or "none configured"
    write_table(frame, table, caption(params, names), label="tab:heads-variants")
    return frame


def variants_figure(table: str, curves_csv: str, out: str) -> None:
    """Per-member learning curves of each variant (writes ``out``.pdf and .png)."""
    from algo_emu.plots import heads_variants as ph

    ph.variants_figure(table, curves_csv, out)
