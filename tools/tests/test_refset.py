"""Committed reference sets (tools/refset.py): what is copied, what is refused, the curves' numbers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tools import refset


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj)


def _finished_run(root: Path) -> None:
    _write(root / "replication.md", "# report\n")
    _write(root / "manifest.json", {"git": {"commit": "abc", "dirty": False}, "config_hash": "h", "device": {},
                                    "versions": {}, "benchmarks": {"jobs": {}}, "outputs": {}})
    _write(root / "tables" / "replication.csv", "experiment,claim,setting,learned,verdict\nE2,c,s,yes,consistent\n")
    # E2: model and weight-blind records, two seeds, known curves
    for kind, scale in (("runs", 1.0), ("blind", 2.0)):
        for seed in (0, 1):
            _write(root / "theorem31" / kind / "p20" / f"seed{seed}" / "metrics.json",
                   {"seed": seed, "setting": {"p": 20, "heads": 1},
                    "by_f": {"tanh": {"train_loss": [scale * (10 + seed), scale * (5 + seed), scale * (4 + seed),
                                                     scale * (3 + seed), scale * (2 + seed)]}}})
    _write(root / "theorem31" / "runs" / "p20" / "model.pt", "weights")          # never copied
    _write(root / "ames" / "corrected" / "checkpoints" / "h8.json", "{}")       # never copied (checkpoint dir)
    _write(root / "figures" / "f_emulation.png", "png")


def test_collect_copies_records_and_tables_never_weights(tmp_path):
    run, dest = tmp_path / "results", tmp_path / "ref" / "set"
    _finished_run(run)
    files = {str(p) for p in refset.collect(run, dest)}
    assert "theorem31/runs/p20/seed0/metrics.json" in files and "figures/f_emulation.png" in files
    assert not any(f.endswith(".pt") or "checkpoints" in f for f in files)
    assert (dest / "theorem31/blind/p20/seed1/metrics.json").is_file()
    assert not (dest / "theorem31/runs/p20/model.pt").exists()
    assert not list((tmp_path / "ref").glob(".set.*")), "temporary copy left behind"


def test_collect_refuses_an_unfinished_run_and_names_what_is_missing(tmp_path):
    run = tmp_path / "results"
    _finished_run(run)
    (run / "manifest.json").unlink()
    with pytest.raises(refset.RefsetError, match="manifest.json"):
        refset.collect(run, tmp_path / "set")
    assert not (tmp_path / "set").exists()


def test_collect_refuses_an_unknown_file_type(tmp_path):
    run = tmp_path / "results"
    _finished_run(run)
    _write(run / "statistical" / "runs" / "x.bin", "?")
    with pytest.raises(refset.RefsetError, match=r"x\.bin"):
        refset.collect(run, tmp_path / "set")


def test_learning_curves_and_flattening_numbers(tmp_path):
    run = tmp_path / "results"
    _finished_run(run)
    curves = refset.learning_curves(run)
    e2 = curves[(curves.experiment == "E2")]
    assert len(e2) == 2 * 2 * 5  # model/blind x 2 seeds x 5 epochs
    flat = refset.flattening(curves).set_index("model")
    # seed-mean model curve: 10.5, 5.5, 4.5, 3.5, 2.5; value at 80 % of 5 epochs = epoch 4 = 3.5
    assert flat.loc["model", "first"] == pytest.approx(10.5)
    assert flat.loc["model", "last"] == pytest.approx(2.5)
    assert flat.loc["model", "late_drop"] == pytest.approx((3.5 - 2.5) / 3.5)
    assert flat.loc["weight-blind", "last"] == pytest.approx(5.0)


def test_build_writes_readme_figure_and_curves_table(tmp_path):
    run, dest = tmp_path / "results", tmp_path / "set"
    _finished_run(run)
    refset.collect(run, dest)
    readme = refset.build(dest, "config/reference.yaml", "Test set").read_text()
    assert "config/reference.yaml" in readme and "`abc`" in readme
    assert "| E2 | c | s | yes | consistent |" in readme
    assert (dest / "figures" / "learning_curves.png").stat().st_size > 0
    table = pd.read_csv(dest / "tables" / "learning_curves.csv")
    assert list(table.columns) == refset.CURVE_COLUMNS
    assert np.isclose(table[(table.model == "model") & (table.epoch == 1)].value.mean(), 10.5)


def test_build_seals_the_set_so_that_it_verifies(tmp_path):
    from algo_emu.report.manifest import verify

    run, ref = tmp_path / "run", tmp_path / "set"
    _finished_run(run)
    refset.collect(run, ref)
    refset.build(ref, "config/reference.yaml", "t")
    assert verify(ref) == []
    (ref / "README.md").write_text("edited\n")
    assert [p.split(": ")[1].split(" (")[0] for p in verify(ref)] == ["differs from the manifest"]


def test_build_refuses_an_uncollected_directory(tmp_path):
    with pytest.raises(refset.RefsetError, match="replication.md"):
        refset.build(tmp_path, "config/reference.yaml", "x")


def test_a_figure_saved_twice_has_the_same_bytes(tmp_path):
    # committed sets list every file's sha256: a rebuilt figure must not change for a timestamp
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from algo_emu.io import sha256_file
    from algo_emu.plots import save_figure

    digests = []
    for name in ("a", "b"):
        fig, ax = plt.subplots()
        ax.plot([1, 2, 3], [3, 1, 2])
        paths = save_figure(fig, tmp_path / name, footer="provenance")
        plt.close(fig)
        digests.append([sha256_file(p) for p in paths])
    assert digests[0] == digests[1]
