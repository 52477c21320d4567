"""The paper-scale benchmark: its FLOP model is the block's, its step profile accounts for the whole step (that it
prices every setting the campaign runs: tools/tests/test_campaign.py)."""

import sys
from dataclasses import asdict

from algo_emu.config import load_config
from algo_emu.runtime import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
import paper_scale as ps  # noqa: E402


def test_flop_model_kept_queries():
    """Fewer kept queries -> fewer FLOPs and exponentials; all kept -> the E1 model of the old benchmark."""
    cfg = load_config(REPO_ROOT / "config/config.yaml", gpu_check=False)
    rows = {r.key: r for r in ps.build_rows(cfg)}
    r = rows["E1 H=1 p=60"]
    fl, exps = ps.flops_step(r)
    # benchmarks/engine.json (the E1-only benchmark): 1846.8864 useful MFLOP per step at these shapes
    assert abs(fl / 1e6 - 1846.8864) < 1e-6
    f = rows["E3 fitted H=12"]
    full = ps.Row(**{**asdict(f), "keep": None})
    assert ps.flops_step(f)[0] < ps.flops_step(full)[0] and ps.flops_step(f)[1] * 2 == ps.flops_step(full)[1]


def test_step_profile_accounts_for_the_whole_step_and_its_products(tmp_path):
    """On the tiny config: the profile's classes share out the whole step (sum 1); the matrix products it found are
    the step's (calls per step from a profile of known length), and their FLOPs per step are 2 b m k n summed over
    those calls; the per-step and per-member parts rebuild both timed steps."""
    import json

    import step_profile as sp

    out = tmp_path / "sp.json"
    assert sp.main(["--config", str(REPO_ROOT / "tests/tiny.yaml"), "--out", str(out), "--only", "E3 fitted H=2",
                    "--steps", "3", "--reps", "1", "--profile-runs", "1"]) == 0
    row = json.loads(out.read_text())["rows"]["E3 fitted H=2"]
    assert abs(sum(row["profile_shares"].values()) - 1) < 1e-9
    calls = row["matmul_calls"]
    assert calls and all(c["per_step"] > 0 and float(c["per_step"]).is_integer() for c in calls)
    flops = sum(2.0 * (c["a"][0] if len(c["a"]) == 3 else 1) * c["a"][-2] * c["a"][-1] * c["b"][-1] * c["per_step"]
                for c in calls)
    assert abs(row["matmul_gflop_per_step"] - flops / 1e9) < 1e-12
    one, E1 = row["ms_per_step_one_seed"], row["members_one_seed"]
    assert abs(row["fixed_ms_per_step"] + E1 * row["per_member_ms"] - one) < 1e-9
    assert abs(row["fixed_ms_per_step"] + row["members"] * row["per_member_ms"] - row["ms_per_step"]) < 1e-9
    assert out.with_suffix(".md").read_text().count("| E3 fitted H=2 |") == 1


def test_gpu_probe_times_every_shape_group_at_tiny_scale(tmp_path):
    """benchmarks/gpu_probe.py on the CPU at tiny scale (on CUDA each K-step call is one graph replay): a group of
    E1's protocols and one of E3's model with its (padded) baseline are timed and priced; nothing fails. (Every
    group: the same command without --only.)"""
    import json
    import subprocess
    import sys

    out = tmp_path / "probe.json"
    only = ["E1 H=2", "E3 fitted H=1"]
    proc = subprocess.run([sys.executable, str(REPO_ROOT / "benchmarks/gpu_probe.py"), "--config",
                           str(REPO_ROOT / "tests/tiny.yaml"), "--device", "cpu", "--out", str(out), "--steps-per-call",
                           "2", "--reps", "1", "--only", *only], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["not_timed"] == {} and sorted(res["groups"]) == ["E1 H=2 p=8", "E3 fitted H=1"]
    assert res["groups"]["E1 H=2 p=8"]["members"] == 2 * 2 * 3  # both protocols, 2 seeds x K/Q/V
    assert res["groups"]["E3 fitted H=1"]["settings"] == ["E3 fitted H=1", "E3 fitted H=1 blind"]
    for g in res["groups"].values():
        assert g["ms_per_step_k_call"] > 0 and g["paper_seconds"] == g["paper_steps"] * g["ms_per_step_k_call"] / 1e3
    assert "one group at a time" in out.with_suffix(".md").read_text()
