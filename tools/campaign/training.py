"""E3's training curves against the paper's values, and the training seconds of a setting: read by the committed
paper-scale set's page (``page.py``) and the campaign's bookkeeping (``core.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from algo_emu.experiments.statistical_tables import paper_value
from algo_emu.io import read_json
from algo_emu.plots import OURS_COLOR, PAPER_COLOR, figure, save_figure


#: The paper's algorithms in the published protocol (each prompt's algorithm drawn uniformly among them).
PAPER_ALGORITHMS = ("lasso", "ridge", "linear")


def paper_on_training_curve(paths: list[str]) -> list[dict]:
    """Where the paper's Appendix C.1 values sit on our training curves, per H of the published protocol.

    Each training prompt of ``reference_code`` draws its algorithm uniformly from lasso, ridge and linear, and
    its training loss is the paper's metric (MSE against the noisy y) on that mixture. So the equal-weight mean of
    the paper's three values at H is a level of that loss, and the first epoch at which our seeds' mean training
    loss falls to it says how far along our training the paper's model sits. An epoch's training loss is the mean
    over its batches while the model still improves, so it overstates the end-of-epoch model's loss: the epoch
    found is at most where a held-out curve would cross. Per H: the level, the crossing epoch of the mean curve
    and of each seed (``None``: never), our final training loss, our held-out mixed MSE at the end (the same
    equal-weight mean of the three algorithms' test MSE), the algorithms' share of the training prompts, and per
    algorithm the largest seed's test MSE and how many seeds are at or above the paper's value.
    """
    import numpy as np

    by_h: dict[int, list[dict]] = {}
    for path in paths:
        r = read_json(path)
        if r.get("mode") != "reference_code":
            continue
        if not r.get("train_history"):
            raise ValueError(f"{path}: no train_history")
        by_h.setdefault(int(r["setting"]["heads"]), []).append(r)
    out = []
    for H, recs in sorted(by_h.items()):
        paper = {a: paper_value("reference_code", a, H)[0] for a in PAPER_ALGORITHMS}
        if any(pd.isna(v) for v in paper.values()):
            continue
        recs = sorted(recs, key=lambda r: r["seed"])
        lengths = {len(r["train_history"]) for r in recs}
        if len(lengths) != 1:
            raise ValueError(f"reference_code H={H}: seeds trained for different epochs {sorted(lengths)}")
        curves = np.array([r["train_history"] for r in recs], dtype=float)
        level = float(np.mean(list(paper.values())))

        def first(curve) -> int | None:
            below = np.flatnonzero(curve <= level)
            return int(below[0]) + 1 if below.size else None

        counts = pd.DataFrame([r["algorithm_counts"] for r in recs]).sum()
        mse = pd.DataFrame([{a: r["mse"][a] for a in PAPER_ALGORITHMS} for r in recs])
        out.append({
            "heads": H, "seeds": [int(r["seed"]) for r in recs], "epochs": curves.shape[1], "paper": paper,
            "level": level, "mean_curve": curves.mean(axis=0).tolist(), "seed_curves": curves.tolist(),
            "cross_epoch": first(curves.mean(axis=0)), "seed_cross": [first(c) for c in curves],
            "final_train": float(curves[:, -1].mean()), "heldout_mixed": float(mse.mean(axis=1).mean()),
            "share": {a: float(counts.get(a, 0) / counts.sum()) for a in PAPER_ALGORITHMS},
            "ours_mean": {a: float(mse[a].mean()) for a in PAPER_ALGORITHMS},
            "ours_max": {a: float(mse[a].max()) for a in PAPER_ALGORITHMS},
            "n_at_or_above": {a: int((mse[a] >= paper[a]).sum()) for a in PAPER_ALGORITHMS},
        })
    return out


def training_vs_paper_figure(info: list[dict], stem: str) -> None:
    """Per H of the published protocol: our seeds' training loss per epoch, the level of the paper's three values
    (their equal-weight mean) and the epoch at which our mean curve reaches it
    (:func:`paper_on_training_curve`)."""
    import numpy as np

    if not info:
        raise ValueError("no reference_code setting with the paper's values to plot")
    with figure(ncols=len(info), width=5.6, height=3.8) as (fig, axes):
        axes = np.atleast_1d(axes).ravel()
        for ax, d in zip(axes, info):
            epochs = np.arange(1, d["epochs"] + 1)
            for i, c in enumerate(d["seed_curves"]):
                ax.plot(epochs, c, color="0.6", lw=0.6, alpha=0.7, label="ours, each seed" if i == 0 else None)
            ax.plot(epochs, d["mean_curve"], color=OURS_COLOR, lw=1.8, label=f"ours, mean of {len(d['seeds'])} seeds")
            ax.axhline(d["level"], color=PAPER_COLOR, ls="--", lw=1.2,
                       label=f"paper: mean of its lasso, ridge, linear ({d['level']:.3g})")
            if d["cross_epoch"]:
                ax.axvline(d["cross_epoch"], color=PAPER_COLOR, ls=":", lw=1.0)
                ax.annotate(f"epoch {d['cross_epoch']}", (d["cross_epoch"], d["level"]), xytext=(6, 12),
                            textcoords="offset points", fontsize=8, color=PAPER_COLOR)
            ax.plot([d["epochs"]], [d["heldout_mixed"]], "D", color=OURS_COLOR, ms=5,
                    label=f"ours, held-out at the end ({d['heldout_mixed']:.3g})")
            ax.set_yscale("log")
            ax.set_ylim(d["final_train"] / 2, d["level"] * 8)
            ax.set_title(f"published protocol, H = {d['heads']}", fontsize=10)
            ax.set_xlabel("epoch")
        axes[0].set_ylabel("MSE against the noisy y")
        axes[0].legend(fontsize=6.5, loc="upper right")
        save_figure(fig, stem, footer="training loss: the mean over each epoch's batches | training prompts draw lasso, ridge or linear uniformly, so the paper's three "
                                      "test values average to a level of the same loss | paper: arXiv 2508.17550v2, "
                                      "Appendix C.1 | ours: the campaign's records")


def timing_blocks(node: Any, keys: tuple = ()) -> list[tuple[tuple, Mapping]]:
    """Every training job's timing block in a record or a model's sidecar, with the keys that lead to it: any
    mapping with an ``epoch_seconds`` list (E1/E2 ``timing``; E3 ``timing.train`` and ``blind.train_timing``;
    E4 ``timing.groups.<h>`` in a sidecar, ``timing.train.groups.<h>`` in its records)."""
    if not isinstance(node, Mapping):
        return []
    if isinstance(node.get("epoch_seconds"), list):
        return [(keys, node)]
    return [b for k, v in node.items() for b in timing_blocks(v, (*keys, k))]


def training_jobs(records: Mapping[Path, Mapping], sidecars: Mapping[Path, Mapping] | None = None
                  ) -> dict[tuple, Mapping]:
    """One timing block per training job of a setting: the seeds of one job share it (the slowest record's is
    kept). Where the setting keeps a sidecar per job (``*.pt.json``: E4's emulator and baseline), those are the
    jobs and the records, which repeat the emulator's timing, are not read; otherwise a job is a folder of seeds
    (E2's model and baseline are two) and a block within it (E3's records hold both its jobs' blocks). Each
    block has ``epoch_seconds`` (every epoch, all calls) and, if resumed, ``resumed_from_epoch``."""
    jobs: dict[tuple, Mapping] = {}
    for path, node in (sidecars or records).items():
        job = Path(path) if sidecars else Path(path).parent.parent
        for keys, block in timing_blocks(node):
            k = (job, keys)
            if k not in jobs or sum(block["epoch_seconds"]) > sum(jobs[k]["epoch_seconds"]):
                jobs[k] = block
    return jobs
