"""The engine: batched ensemble == one-at-a-time, determinism, kill-and-resume."""

import json

import pytest
import torch

from algo_emu.data import heads as hd
from algo_emu.experiments.heads import HeadsTask, train_setting
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.train import FAIL_ENV, Member, TrainConfig, member_losses, train_ensemble


def _datasets(params, seeds):
    return {s: hd.generate(s, params["n_prompts"], params["n_tokens"], params["d"], params["target_hidden"]) for s in seeds}


def _train(params, datasets, roles, H=2, p=7, epochs=2):
    task = HeadsTask(datasets, params, torch.device("cpu"), roles=roles, dtype=torch.float64)
    model = EnsembleEmulator([torch_stream(m.seed, "heads", "init", m.name) for m in task.members], params["d"],
                             task.d_outs, params["n_tokens"], params["hidden"], H, p, dtype=torch.float64)
    train_ensemble(model, task, TrainConfig(epochs=epochs, batch_size=params["batch_size"], lr=1e-2))
    return task, model


def test_batched_ensemble_equals_one_at_a_time(heads_params):
    seeds = [3, 7]
    datasets = _datasets(heads_params, seeds)
    task, model = _train(heads_params, datasets, roles=("K", "Q", "V"))
    # 36 training prompts / batch 8 -> 5 steps per epoch (last one partial), 2 epochs.
    moved, diffs = 0.0, {}
    for e, member in enumerate(task.members):
        _, alone = _train(heads_params, {member.seed: datasets[member.seed]}, roles=(member.name,))
        a, b = alone.member_state(0), model.member_state(e)
        init = EnsembleEmulator([torch_stream(member.seed, "heads", "init", member.name)], 3, task.d_outs[e], 4, 12, 2, 7,
                                dtype=torch.float64).member_state(0)
        for key in a:
            diffs[key] = max(diffs.get(key, 0.0), float((a[key] - b[key]).abs().max()))
            moved = max(moved, float((a[key] - init[key]).abs().max()))
    assert moved > 1e-3  # the parameters really trained
    # Equal up to float64 rounding. The key bias b_k has an exactly-zero true gradient
    # (softmax ignores a per-query constant), so Adam turns its ~1e-17 rounding noise
    # into updates of up to lr * noise / eps ~ 1e-10: hence its looser bound.
    assert max(v for k, v in diffs.items() if k != "b_k") < 1e-12, diffs
    assert diffs["b_k"] < 1e-8, diffs


def test_member_losses_masks_padding():
    pred = torch.zeros(2, 1, 1, 3)
    target = torch.tensor([[[[1.0, 1.0, 1.0]]], [[[2.0, 9.0, 9.0]]]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    torch.testing.assert_close(member_losses(pred, target, mask), torch.tensor([1.0, 4.0]))


def test_same_seed_twice_gives_identical_metrics(heads_params, tmp_path):
    paths = []
    for s in (0, 1):
        path = tmp_path / f"seed{s}.pt"
        hd.write_dataset(path, s, heads_params)
        paths.append(str(path))
    a = train_setting(heads_params, 2, 7, [0, 1], paths, tmp_path / "a", None, "cpu", 1)
    b = train_setting(heads_params, 2, 7, [0, 1], paths, tmp_path / "b", None, "cpu", 1)
    for s in (0, 1):
        assert a[s]["mse_by_target"] == b[s]["mse_by_target"]
        assert a[s]["member_mse"] == b[s]["member_mse"]
        assert a[s]["history"] == b[s]["history"]
    assert a[0]["mse"] != a[1]["mse"]  # seeds are different runs
    on_disk = json.loads((tmp_path / "a" / "seed1" / "metrics.json").read_text())
    assert on_disk["mse"] == a[1]["mse"] and on_disk["environment"]["device"] == "cpu"


@pytest.mark.parametrize("schedule", [None, "cosine"])
def test_kill_and_resume_gives_identical_final_metrics(heads_params, tmp_path, monkeypatch, schedule):
    """None: the key absent (constant); cosine: the rate of each epoch is a function of the epoch alone."""
    heads_params["epochs"] = 3
    if schedule:
        heads_params["lr_schedule"] = schedule
    path = tmp_path / "seed0.pt"
    hd.write_dataset(path, 0, heads_params)
    straight = train_setting(heads_params, 1, 7, [0], [str(path)], tmp_path / "straight", None, "cpu", 1)[0]

    ckpt = tmp_path / "ckpt.pt"
    monkeypatch.setenv(FAIL_ENV, "0")
    with pytest.raises(RuntimeError, match="injected failure"):
        train_setting(heads_params, 1, 7, [0], [str(path)], tmp_path / "resumed", ckpt, "cpu", 1)
    assert ckpt.exists() and not (tmp_path / "resumed" / "seed0" / "metrics.json").exists()
    assert torch.load(ckpt, weights_only=False)["epoch"] == 1
    monkeypatch.delenv(FAIL_ENV)
    resumed = train_setting(heads_params, 1, 7, [0], [str(path)], tmp_path / "resumed", ckpt, "cpu", 1)[0]
    assert resumed["timing"]["resumed_from_epoch"] == 1 and resumed["timing"]["epochs_run_this_call"] == 2
    assert resumed["mse_by_target"] == straight["mse_by_target"]
    assert resumed["member_mse"] == straight["member_mse"]
    assert [h["train_loss"] for h in resumed["history"]] == [h["train_loss"] for h in straight["history"]]
    assert resumed["params"] == straight["params"] and resumed["config_hash"] == straight["config_hash"]
    assert resumed["params"].get("lr_schedule") == schedule  # a constant run's params are what they were before


@pytest.mark.parametrize("key,value", [("lr", 5e-3), ("lr_schedule", "cosine")])
def test_checkpoint_of_another_config_is_not_resumed(heads_params, tmp_path, key, value):
    path = tmp_path / "seed0.pt"
    hd.write_dataset(path, 0, heads_params)
    ckpt = tmp_path / "ckpt.pt"
    train_setting(heads_params, 1, 7, [0], [str(path)], tmp_path / "a", ckpt, "cpu", 1)
    heads_params[key] = value
    out = train_setting(heads_params, 1, 7, [0], [str(path)], tmp_path / "b", ckpt, "cpu", 1)[0]
    assert out["timing"]["resumed_from_epoch"] == 0 and out["timing"]["epochs_run_this_call"] == 2


#: The record hashes of a 3-epoch tiny heads run (H=2, p=7) made before ``lr_schedule`` existed: a constant
#: schedule must leave a run's params, and so its fingerprint and config hash, as they were.
BEFORE_LR_SCHEDULE = {"config_hash": "cdabd7f27ca4db02", "sweep_config_hash": "b594026abd0f3699"}


def test_constant_lr_schedule_leaves_a_run_bit_identical(heads_params, tmp_path):
    """The key absent and ``constant``: the same numbers bit for bit, and the hashes runs had before the key
    existed (the float values themselves depend on the CPU, so they are compared run against run)."""
    heads_params["epochs"] = 3
    path = tmp_path / "seed0.pt"
    hd.write_dataset(path, 0, heads_params)
    runs = {}
    for schedule in (None, "constant"):
        params = dict(heads_params, **({"lr_schedule": schedule} if schedule else {}))
        out = train_setting(params, 2, 7, [0], [str(path)], tmp_path / str(schedule), None, "cpu", 1)[0]
        assert {k: out[k] for k in BEFORE_LR_SCHEDULE} == BEFORE_LR_SCHEDULE
        assert "lr_schedule" not in out["params"] and not any("lr" in h for h in out["history"])
        runs[schedule] = (out["mse"], out["member_mse"], [h["train_loss"] for h in out["history"]])
    assert runs[None] == runs["constant"]


def test_cosine_schedule_sets_the_rate_of_each_epoch(heads_params, monkeypatch):
    """lr_epoch = lr * 0.5 * (1 + cos(pi * epoch / epochs)), in the optimiser at every step of that epoch."""
    import math

    from algo_emu import train as engine

    seen = []
    real = engine.make_step

    def spy(model, task, cfg, opt):
        step = real(model, task, cfg, opt)

        def wrapped(index):
            seen.append(opt.param_groups[0]["lr"])
            return step(index)
        return wrapped

    monkeypatch.setattr(engine, "make_step", spy)
    datasets = _datasets(heads_params, [0])
    task = HeadsTask(datasets, heads_params, torch.device("cpu"), dtype=torch.float64)
    model = EnsembleEmulator([torch_stream(m.seed, "heads", "init", m.name) for m in task.members], heads_params["d"],
                             task.d_outs, heads_params["n_tokens"], heads_params["hidden"], 2, 7, dtype=torch.float64)
    cfg = TrainConfig(epochs=4, batch_size=8, lr=2e-3, lr_schedule="cosine")
    result = train_ensemble(model, task, cfg)
    expected = [2e-3 * 0.5 * (1 + math.cos(math.pi * e / 4)) for e in range(4)]
    assert expected[0] == 2e-3 and expected[2] == 2e-3 * 0.5 * (1 + math.cos(math.pi / 2))
    assert [engine.epoch_lr(cfg, e) for e in range(4)] == expected
    assert [h["lr"] for h in result.history] == expected
    steps = math.ceil(task.n_train / 8)  # 36 training prompts / batch 8 -> 5 steps per epoch
    assert seen == [lr for lr in expected for _ in range(steps)]
    assert engine.epoch_lr(TrainConfig(epochs=4, lr=2e-3), 3) == 2e-3  # constant
    with pytest.raises(ValueError, match="lr_schedule: unknown schedule 'linear'"):
        train_ensemble(model, task, TrainConfig(epochs=1, lr_schedule="linear"))


def test_engine_rejects_bad_settings():
    class Task:
        members = [Member(0, "a")]
        n_train = 4

    model = EnsembleEmulator([torch.Generator().manual_seed(0)], 2, 2, 2, 4, 1, 3)
    with pytest.raises(ValueError, match="epochs must be >= 0"):
        train_ensemble(model, Task(), TrainConfig(epochs=-1))
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        train_ensemble(model, Task(), TrainConfig(epochs=1, batch_size=0))


@pytest.mark.slow
def test_compiled_step_matches_eager(heads_params, tmp_path):
    """torch.compile (config heads.compile) trains to the same numbers as eager, to float32 tolerance."""
    path = tmp_path / "seed0.pt"
    hd.write_dataset(path, 0, heads_params)
    eager = train_setting(heads_params, 2, 7, [0], [str(path)], tmp_path / "e", None, "cpu", 1)[0]
    compiled = train_setting(heads_params | {"compile": True}, 2, 7, [0], [str(path)], tmp_path / "c", None, "cpu", 1)[0]
    for role in ("K", "Q", "V"):
        assert compiled["member_mse"][role] == pytest.approx(eager["member_mse"][role], rel=1e-4)


class _QueryTask:
    """Regression read at the last ``m`` tokens only (``loss_positions``), like E3's fitted mode."""

    def __init__(self, seeds, n=6, m=3, d=4, N=20, dtype=torch.float64):
        self.members = [Member(s, "q") for s in seeds]
        self.X = torch.stack([torch.randn(N, n, d, generator=torch_stream(s, "t", "X"), dtype=dtype) for s in seeds])
        self.Y = torch.stack([torch.randn(N, m, 1, generator=torch_stream(s, "t", "Y"), dtype=dtype) for s in seeds])
        self.loss_positions = torch.arange(n - m, n)
        self.n_train = N
        self._rows = torch.arange(len(seeds))[:, None]

    def batch(self, index):
        return self.X[self._rows, index], self.Y[self._rows, index]


def test_loss_positions_batched_equals_one_at_a_time_reference():
    """The engine with loss positions (queries of those tokens only) trains every member to the numbers of
    a one-member-at-a-time loop over the plain full-p block (its own Adam, same data order)."""
    import math
    from algo_emu.models.emulator import reference_forward
    from algo_emu.train import epoch_order

    seeds, H, p, lr, B, epochs = [1, 4], 2, 9, 1e-2, 8, 2
    task = _QueryTask(seeds)
    gens = lambda ss: [torch_stream(s, "t", "init") for s in ss]  # noqa: E731
    model = EnsembleEmulator(gens(seeds), 4, 1, 6, 8, H, p, dtype=torch.float64)
    train_ensemble(model, task, TrainConfig(epochs=epochs, batch_size=B, lr=lr))
    for e, s in enumerate(seeds):
        state = {k: v.requires_grad_() for k, v in EnsembleEmulator(gens([s]), 4, 1, 6, 8, H, p,
                                                                  dtype=torch.float64).member_state(0).items()}
        opt = torch.optim.Adam(list(state.values()), lr=lr)
        for epoch in range(epochs):
            order = epoch_order([task.members[e]], task.n_train, epoch, "shuffle", "cpu")[0]
            for i in range(math.ceil(task.n_train / B)):
                idx = order[i * B:(i + 1) * B]
                pred = reference_forward(state, task.X[e, idx], H)[:, 3:]
                loss = (pred - task.Y[e, idx]).square().mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
        got = model.member_state(e)
        for k, v in state.items():
            tol = 1e-8 if k == "b_k" else 1e-11  # b_k: zero true gradient, Adam amplifies rounding (see above)
            assert float((got[k] - v.detach()).abs().max()) < tol, (s, k)
