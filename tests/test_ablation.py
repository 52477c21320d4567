"""The prompt-ablation mechanism flags a model that ignores its prompt and passes one that reads it."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from algo_emu import ablation as ab
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.train import Member, TrainConfig, train_ensemble

D, T, N = 3, 4, 512
LAYOUT = ab.PromptLayout("toy", d_in=2 * D, weights=((D, 2 * D),))
A = torch.tensor([1.5, -2.0, 1.0])   # the read-out of w
C = torch.tensor([0.5, 0.25, -0.5])  # the read-out of the mean x


def toy_prompts(seed: int, n: int = N) -> torch.Tensor:
    """Tokens [x_i; w]: x_i standard normal, w standard normal per prompt, tiled onto every token."""
    x = torch.randn((n, T, D), generator=torch_stream(seed, "toy", "x"))
    w = torch.randn((n, D), generator=torch_stream(seed, "toy", "w"))
    return torch.cat([x, w[:, None].expand(n, T, D)], dim=-1)


def toy_target(inputs: torch.Tensor, reads: bool) -> torch.Tensor:
    """(N, T, 1): c^T mean_j x_j, plus a^T w for the model that must read its prompt."""
    x, w = inputs[..., :D], inputs[:, 0, D:]
    t = (x.mean(1) @ C)[:, None].expand(-1, T)
    if reads:
        t = t + (w @ A)[:, None]
    return t[..., None]


class ToyTask:
    """Member 0 must read the weights (target a^T w + c^T xbar); member 1's target ignores them."""

    def __init__(self, inputs: torch.Tensor) -> None:
        self.members = [Member(0, "reads"), Member(0, "ignores")]
        self.inputs = inputs
        self.targets = torch.stack([toy_target(inputs, True), toy_target(inputs, False)])
        self.n_train = inputs.shape[0]

    def batch(self, index):
        return self.inputs[index], self.targets[torch.arange(2)[:, None], index]


def _train(task, d_in: int, name: str) -> EnsembleEmulator:
    torch.manual_seed(0)
    model = EnsembleEmulator([torch_stream(0, "toy", name, m.name) for m in task.members], d_in=d_in, d_out=1,
                             n_tokens=T, hidden=16, heads=1, p=T, attention="matmul")
    train_ensemble(model, task, TrainConfig(epochs=40, batch_size=32, lr=1e-2, stream="toy/shuffle"))
    return model.eval()


@pytest.fixture(scope="module")
def trained():
    torch.set_num_threads(1)
    task = ToyTask(toy_prompts(0))
    model = _train(task, 2 * D, "init")
    blind = _train(ab.WeightBlindTask(task, LAYOUT), D, "init_blind")
    return model, blind


def _mses(model, blind, inputs):
    """{ablation: (mse of the reading member, mse of the ignoring member)} on ``inputs``."""
    targets = [toy_target(inputs, True), toy_target(inputs, False)]
    variants = {ab.NONE: inputs} | ab.ablated_inputs(inputs, LAYOUT, seed=0, stream=("toy",),
                                                     donors={"other_algorithm": -ab.prompt_weights(inputs, LAYOUT)})
    out = {}
    with torch.no_grad():
        for name, x in variants.items():
            pred = model(torch.stack([x, x]))
            out[name] = [ab.mse(pred[e], targets[e]) for e in range(2)]
        xb = ab.strip_weights(inputs, LAYOUT)
        pred = blind(torch.stack([xb, xb]))
        out[ab.BLIND] = [ab.mse(pred[e], targets[e]) for e in range(2)]
    return out


def test_mechanism_flags_a_model_that_ignores_its_prompt_and_passes_one_that_reads_it(trained):
    model, blind = trained
    res = _mses(model, blind, toy_prompts(1, 1024))
    reads_none, ignores_none = res[ab.NONE]
    assert reads_none < 1e-3 and ignores_none < 1e-3          # both fit their own target (measured ~2e-6, ~1e-7)
    for name in ("other_prompt", "permuted", "random", "zeros", "other_algorithm"):
        reads, ignores = res[name]
        # the reader collapses: zeros -> Var(a^T w) = |a|^2 = 7.25, another prompt's w -> 2|a|^2,
        # the sign-flipped donor -> 4|a|^2 (measured 7.1, 13.5, 28.3; permuted 15.2, random 14.5)
        assert reads > 3.0, (name, reads, reads_none)
        # the ignorer does not notice: its ablated MSE equals its unablated MSE to within noise
        assert ignores == pytest.approx(ignores_none, abs=1e-5), (name, ignores, ignores_none)
    # the weight-blind baseline: the reader is far better than it, the ignorer is not
    assert res[ab.BLIND][0] > 5.0                               # cannot see w: error ~ Var(a^T w)
    assert res[ab.NONE][0] / res[ab.BLIND][0] < 0.01
    assert res[ab.BLIND][1] < 1e-3                              # nothing to lose by not seeing w


def test_table_rows_and_ratio_to_blind(trained):
    model, blind = trained
    res = _mses(model, blind, toy_prompts(1, 256))
    rows = []
    for seed in (0, 1):
        for e, role in enumerate(("reads", "ignores")):
            rows += ab.ablation_rows("toy", role, {"p": T}, seed, {k: v[e] * (1 + seed) for k, v in res.items()})
    tidy = pd.DataFrame(rows)
    assert list(tidy.columns) == ["experiment", "mode", "p", "seed", "ablation", "mse"]
    table = ab.ablation_table(tidy, ["p"])
    assert list(table.columns) == ["experiment", "mode", "p"] + ab.ABLATION_COLUMNS
    assert list(table[table["mode"] == "reads"].ablation)[:3] == [ab.NONE, ab.BLIND, "other_prompt"]
    row = table[(table["mode"] == "reads") & (table.ablation == ab.NONE)].iloc[0]
    blind_row = table[(table["mode"] == "reads") & (table.ablation == ab.BLIND)].iloc[0]
    # seed 1's numbers are twice seed 0's: mean 1.5 x, sample std = |x - 2x| / sqrt(2)
    x = res[ab.NONE][0]
    assert row.mse_mean == pytest.approx(1.5 * x, rel=1e-12)
    assert row.mse_std == pytest.approx(x / 2 ** 0.5, rel=1e-12)
    assert row.n_seeds == 2
    assert row.mse_over_blind == pytest.approx(x / res[ab.BLIND][0], rel=1e-12)
    assert blind_row.mse_over_blind == 1.0
    main = pd.DataFrame({"mode": ["reads", "ignores"], "p": [T, T], "mse_mean": [1.0, 2.0]})
    ratio = ab.over_blind(main, table, on=["mode", "p"])
    assert ratio.tolist() == pytest.approx([1.0 / blind_row.mse_mean, 2.0 / (1.5 * res[ab.BLIND][1])])


def test_ablations_are_deterministic_and_do_what_they_say():
    x = toy_prompts(3, 64)
    w = ab.prompt_weights(x, LAYOUT)
    a1 = ab.ablated_inputs(x, LAYOUT, seed=5, stream=("toy",))
    a2 = ab.ablated_inputs(x, LAYOUT, seed=5, stream=("toy",))
    a3 = ab.ablated_inputs(x, LAYOUT, seed=6, stream=("toy",))
    for name in ab.ABLATIONS:
        assert torch.equal(a1[name], a2[name])
        assert torch.equal(a1[name][..., :D], x[..., :D])          # only the weights change
    assert not torch.equal(a1["other_prompt"], a3["other_prompt"])
    other = ab.prompt_weights(a1["other_prompt"], LAYOUT)
    assert not (other == w).all(dim=1).any()                       # no prompt keeps its own weights
    assert torch.equal(other.sort(0).values, w.sort(0).values)     # the same set of weight vectors
    perm = ab.prompt_weights(a1["permuted"], LAYOUT)
    assert torch.equal(perm.sort(1).values, w.sort(1).values)      # same coordinates, reordered
    rnd = ab.prompt_weights(a1["random"], LAYOUT).double()
    assert torch.allclose(rnd.norm(dim=1), w.double().norm(dim=1), rtol=1e-6)
    assert not torch.allclose(rnd, w.double())
    assert ab.prompt_weights(a1["zeros"], LAYOUT).abs().sum() == 0


def test_weight_blocks_are_ablated_separately():
    layout = ab.PromptLayout("wb", d_in=5, weights=((1, 4), (4, 5)), tokens=(0, 2))
    x = torch.randn(8, 3, 5, generator=torch.Generator().manual_seed(0))
    x[:, 1, 1:] = x[:, 0, 1:]                                      # tokens 0 and 1 carry [w; b]
    out = ab.ablate(x, layout, "permuted", seed=0)
    assert torch.equal(out[:, :, 4], x[:, :, 4])                   # a 1-wide block cannot move
    assert torch.equal(out[:, 2], x[:, 2])                         # the token without weights is untouched
    rnd = ab.ablate(x, layout, "random", seed=0)
    assert torch.allclose(rnd[:, 0, 4].abs(), x[:, 0, 4].abs())    # per-block norm


def test_extra_ablation_and_name_clash():
    x = toy_prompts(0, 16)

    def zero_x(inputs, gen):
        inputs[..., :D] = 0
        return inputs

    out = ab.ablated_inputs(x, LAYOUT, seed=0, ablations=(), extra={"context_zeroed": zero_x})
    assert out["context_zeroed"][..., :D].abs().sum() == 0
    assert torch.equal(out["context_zeroed"][..., D:], x[..., D:])
    with pytest.raises(ValueError, match=r"not 'none'/'weight_blind': \['none'\]"):
        ab.ablated_inputs(x, LAYOUT, seed=0, ablations=("zeros",), extra={"none": zero_x})


def test_ablation_of_a_model_without_weights_is_an_error():
    blind = LAYOUT.blind()
    x = ab.strip_weights(toy_prompts(0, 4), LAYOUT)
    with pytest.raises(ValueError, match=r"ablation 'zeros' asked of a model whose prompt has no weights "
                                         r"\(toy \(weight-blind\): d_in=3, no weights in the prompt\)"):
        ab.ablate(x, blind, "zeros", seed=0)
    with pytest.raises(ValueError, match="prompt ablations asked of a model whose prompt has no weights"):
        ab.ablated_inputs(x, blind, seed=0)
    # the baseline's inputs under the full layout: the width tells
    with pytest.raises(ValueError, match=r"inputs of shape \(4, 4, 3\) do not match the layout \(toy: d_in=6, "
                                         r"weights in columns \[\(3, 6\)\]\); expected \(N, T, 6\)"):
        ab.ablate(x, LAYOUT, "zeros", seed=0)
    with pytest.raises(ValueError, match="unknown ablation 'shuffled'"):
        ab.ablate(toy_prompts(0, 4), LAYOUT, "shuffled", seed=0)
    bad = toy_prompts(0, 4)
    bad[0, 1, D] += 1
    with pytest.raises(ValueError, match="toy: the tokens 0..3 do not all carry the same weights"):
        ab.ablate(bad, LAYOUT, "zeros", seed=0)


def test_budget_mismatch_is_an_error_naming_the_key():
    params = {"epochs": 10, "n_prompts": 100, "batch_size": 32, "lr": 1e-3, "hidden": 16, "heads": 1}
    model = ab.budget(params, p=8)
    ab.check_budget(model, dict(model))
    with pytest.raises(ValueError, match=r"differs from the model's: epochs: model 10, baseline 5$"):
        ab.check_budget(model, model | {"epochs": 5})
    with pytest.raises(ValueError, match=r"lr: model 0.001, baseline 0.01; heads: model 1, baseline 2$"):
        ab.check_budget(model, model | {"lr": 1e-2, "heads": 2})
    with pytest.raises(ValueError, match=r"p \(missing from the baseline's budget\)"):
        ab.check_budget(model, {k: v for k, v in model.items() if k != "p"})
    with pytest.raises(ValueError, match=r"training budget: missing key\(s\) \['p'\]"):
        ab.budget(params)


def test_table_without_baseline_is_an_error():
    rows = ab.ablation_rows("toy", "reads", {"p": 4}, 0, {"none": 1.0, "zeros": 2.0})
    with pytest.raises(ValueError, match=r"no 'weight_blind' baseline for \{'experiment': 'toy', 'mode': 'reads', 'p': 4\}"):
        ab.ablation_table(rows, ["p"])


def test_weight_blind_batches_are_the_models_batches_without_the_weights_stripped_once_per_job():
    """A task that stores its inputs (E2's, E3's) hands the weight-blind baseline a copy of them without the weight
    columns, made once: its batches equal the model's batches with the columns removed, value for value, at every
    step; a task without ``map_inputs`` (the toy task) has them removed at every step instead."""
    from algo_emu.experiments import statistical as e3
    from algo_emu.experiments import theorem31 as e2

    e3_params = {"n_prompts": 24, "n_context": 5, "n_query": 2, "d": 3, "hidden": 12, "p": 8,
                 "algorithms": {"fitted": ["ols", "ridge", "lasso", "gd"], "reference_code": ["linear", "ridge", "lasso"]},
                 "data_params": {"fitted": {}, "reference_code": {}}}
    e2_params = {"n_prompts": 24, "n_tokens": 4, "d": 3, "fs": ["tanh", "step"], "x_dist": "uniform", "x_scale": 5.0,
                 "gd_eta": 0.1, "batch_size": 8, "test_fraction": 0.25}
    cpu = torch.device("cpu")
    cases = [(e3.StatisticalTask([0, 1], mode, e3_params, cpu), e3.prompt_layout(e3_params, mode)) for mode in e3.MODES]
    cases.append((e2.Theorem31Task([0, 1], e2_params, cpu), e2.prompt_layout(e2_params["d"])))
    for task, lay in cases:
        blind = ab.WeightBlindTask(task, lay)
        assert blind._per_step is False and blind.task is not task
        index = torch.randint(0, task.n_train, (len(task.members), 5), generator=torch.Generator().manual_seed(1))
        (x, y), (xb, yb) = task.batch(index), blind.batch(index)
        assert xb.shape[-1] == lay.blind().d_in and torch.equal(xb, ab.strip_weights(x, lay)) and torch.equal(yb, y)
        assert task.batch(index)[0].shape[-1] == lay.d_in  # the model's own task is left whole
    toy = ToyTask(toy_prompts(0, 16))
    blind = ab.WeightBlindTask(toy, LAYOUT)
    index = torch.arange(4).expand(2, 4)
    assert blind._per_step is True and torch.equal(blind.batch(index)[0], ab.strip_weights(toy.batch(index)[0], LAYOUT))
