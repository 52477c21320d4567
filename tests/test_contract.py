"""The contract of a trained experiment (docs/architecture.md): a new one is a config section, a task and an
evaluation; the shared layer does the rest. A toy experiment is defined below (between the two rulers, under 150
lines) and run through the engine (train_ensemble via Runner.train), its weight-blind baseline
(ablation.WeightBlindTask), frozen evaluation with prompt ablations (FrozenFile), per-seed records
(Runner.write_records), the record loader (RunSpec), the tables (summarise_by, ablation_table, write_table) and the
report's rules (learned, gate, verdict, the report's row format). What the contract does not yet cover: the
workflow rules and the report's section list (report/replication.py) name each experiment by hand."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml

from algo_emu import ablation as ab
from algo_emu import config, records
from algo_emu.frozen import FrozenFile, save_frozen
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.report import replication as rep
from algo_emu.rng import torch_stream
from algo_emu.runner import Runner, train_config
from algo_emu.runtime import REPO_ROOT
from algo_emu.tables import summarise_by, write_table
from algo_emu.train import Member

# ============================================================ the toy experiment (the contract's side of it)
TRAINING_KEYS = ("epochs", "batch_size", "lr", "checkpoint_every", "compile", "lr_schedule", "attention")
SCHEMA = {  # its config section: own keys, the training keys from the shared training schema
    "type": "object", "additionalProperties": False,
    "properties": {"n_prompts": {"type": "integer", "minimum": 8, "default": 384},
                   "n_tokens": {"type": "integer", "minimum": 1, "default": 4},
                   "d": {"type": "integer", "minimum": 1, "default": 3},
                   "hidden": {"type": "integer", "default": 8}, "heads": {"type": "integer", "default": 1},
                   **{k: {"$ref": f"{REPO_ROOT}/workflow/schemas/training.schema.yaml#/$defs/{k}"}
                      for k in TRAINING_KEYS}},
}
SECTION = {"epochs": 25, "lr": 0.01, "batch_size": 32}  # what a config file would say


def layout(section: dict) -> ab.PromptLayout:
    d = section["d"]
    return ab.PromptLayout("toy", d_in=2 * d, weights=((d, 2 * d),))  # token i = [x_i; w]


class ToyTask:
    """Per seed, prompts of n tokens [x_i; w] (w tiled); the target at every token is sum(w) / sqrt(d), which only
    the weights in the prompt can tell. One member per seed; the last quarter of each seed's prompts is held out."""

    def __init__(self, seeds: list[int], section: dict) -> None:
        N, n, d = section["n_prompts"], section["n_tokens"], section["d"]
        self.members = [Member(s, "sum") for s in seeds]
        gens = [torch_stream(s, "toy", "data") for s in seeds]
        x = torch.stack([torch.randn(N, n, d, generator=g) for g in gens])
        w = torch.stack([torch.randn(N, 1, d, generator=g) for g in gens]).expand(-1, -1, n, -1)
        inputs, targets = torch.cat([x, w], -1), w.sum(-1, keepdim=True) / math.sqrt(d)
        self.n_train = N - N // 4
        self.inputs, self.targets = inputs[:, :self.n_train], targets[:, :self.n_train]
        self.test_inputs, self.test_targets = inputs[:, self.n_train:], targets[:, self.n_train:]

    def batch(self, index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.arange(len(self.members))[:, None]
        return self.inputs[rows, index], self.targets[rows, index]

    def evaluate(self, model, inputs: torch.Tensor | None = None, transform=lambda x: x) -> list[float]:
        """Held-out MSE per member; ``inputs`` replace the prompts seen (an ablation), targets stay."""
        pred = model(transform(self.test_inputs if inputs is None else inputs))
        return ((pred - self.test_targets) ** 2).mean(dim=(1, 2, 3)).tolist()


def run(section: dict, seeds: list[int], out: Path, blind: bool = False) -> dict[int, dict]:
    """Train (or train the weight-blind baseline), evaluate frozen with the prompt ablations, write records."""
    runner, task, lay = Runner("cpu", 1), ToyTask(seeds, section), layout(section)
    d_in = lay.blind().d_in if blind else lay.d_in
    meta = {"d_in": d_in, "seeds": seeds, "blind": blind}

    def build(meta: dict) -> EnsembleEmulator:
        return EnsembleEmulator([torch_stream(s, "toy", "init_blind" if meta["blind"] else "init") for s in meta["seeds"]],
                                meta["d_in"], 1, section["n_tokens"], section["hidden"], section["heads"],
                                section["n_tokens"], attention=section["attention"])

    model = build(meta)
    run_params = dict(section) | ({"weight_blind": True} if blind else {})
    result = runner.train(model, ab.WeightBlindTask(task, lay) if blind else task,
                          train_config("toy", section, stream="toy/shuffle"), run_params, None, seeds=seeds)
    save_frozen(out / "model.pt", model, meta)
    frozen = FrozenFile(out / "model.pt", build)
    with frozen.evaluating() as m:
        if blind:
            mses = {ab.NONE: task.evaluate(m, transform=lambda x: ab.strip_weights(x, lay))}
        else:
            mses = {name: task.evaluate(m, None if name == ab.NONE else torch.stack(
                [ab.ablate(task.test_inputs[e], lay, name, seed=s, stream=("toy",)) for e, s in enumerate(seeds)]))
                for name in (ab.NONE, *ab.ABLATIONS)}
    proof = frozen.proof()
    recs = {s: {"experiment": "toy", "seed": s, "weight_blind": blind, "setting": {"d": section["d"]},
                "by_member": {"sum": {"mse": mses[ab.NONE][e], "ablation_mse": {k: v[e] for k, v in mses.items()},
                                      "train_loss": [h["train_loss"][e] for h in result.history]}},
                "budget": ab.budget(section, p=section["n_tokens"]), "frozen": proof,
                **runner.provenance(run_params), "timing": runner.timing(result), "environment": runner.environment()}
            for e, s in enumerate(seeds)}
    return runner.write_records(out, recs)


SPEC = records.RunSpec(  # the records as table rows
    experiment="toy", rows="by_member",
    columns={"member": records.KEY, "d": "setting.d", "seed": "seed", "mse": "@.mse",
             "final_train_loss": records.last("@.train_loss"), "config_hash": "config_hash"},
    setting=("member", "d"), metrics=("mse", "final_train_loss"), records="*/seed*/metrics.json",
    curves=lambda r: [(f"d={r['setting']['d']}", "weight-blind" if r["weight_blind"] else "model", epoch, "train loss", v)
                      for m in r["by_member"].values() for epoch, v in enumerate(m["train_loss"], start=1)])
# ============================================================ end of the toy experiment


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    (root / "toy.schema.yaml").write_text(yaml.safe_dump(SCHEMA))
    mp = pytest.MonkeyPatch()
    mp.setattr(config, "SCHEMA_DIR", root)
    section = config.schema_defaults("toy") | SECTION
    seeds = [0, 1]
    model, blind = run(section, seeds, root / "model"), run(section, seeds, root / "blind", blind=True)
    yield section, seeds, root, model, blind
    mp.undo()


def _table(root: Path, model_dir: str, blind_dir: str, seeds: list[int]):
    runs = records.load_runs([str(root / model_dir / f"seed{s}" / "metrics.json") for s in seeds], SPEC)
    base = records.load_runs([str(root / blind_dir / f"seed{s}" / "metrics.json") for s in seeds], SPEC)
    table = summarise_by(runs, ["member"], ["mse"])
    return table.assign(mse_over_blind=table.mse_mean / summarise_by(base, ["member"], ["mse"]).mse_mean)


def test_contract_a_new_experiment_runs_through_the_shared_layer(made):
    section, seeds, root, model, blind = made
    assert sum(1 for _ in open(__file__).read().split("# ====")[1].splitlines()) <= 150
    table = _table(root, "model", "blind", seeds)
    write_table(table, root / "toy.csv", "Toy: held-out MSE and the weight-blind ratio.")
    assert (root / "toy.md").read_text().startswith("Toy: held-out MSE") and table.n_seeds.iloc[0] == len(seeds)
    rows = [r for s in seeds for r in ab.ablation_rows("toy", "toy", {"member": "sum"}, s,
            {**model[s]["by_member"]["sum"]["ablation_mse"], ab.BLIND: blind[s]["by_member"]["sum"]["mse"]})]
    ablations = ab.ablation_table(rows, ["member"]).set_index("ablation").mse_mean
    # The model reads w from its prompt: far below its baseline, and every ablation of w undoes it.
    assert table.mse_over_blind.iloc[0] < 0.1
    assert all(ablations[a] > 10 * ablations[ab.NONE] for a in ("other_prompt", "random", "zeros"))
    for rec in model.values():
        assert rec["frozen"]["bit_identical"] and rec["frozen"]["file_unchanged"] and rec["timing"]["epoch_seconds"]
        ab.check_budget(rec["budget"], blind[rec["seed"]]["budget"])
    learned, why = rep.learned_from_row(table.iloc[0].to_dict())
    scale = rep.Scale("toy: 25 epochs, 2 seeds", True)
    row = rep.Row("toy", "the model reads w from its prompt", setting="member sum", comparable_mode="toy",
                  comparable_mean=table.mse_mean.iloc[0], learned=learned, scale=scale.text,
                  verdict=rep.gate(learned, scale) or rep.claim_verdict(True, False, scale), reason=why)
    report = "\n".join(rep.rows_markdown(rep.rows_frame([row])))
    assert learned == "yes" and "supported" in report and "MSE / weight-blind baseline's MSE" in report
    # Its learning curves are read through the same declaration (what refset draws): every epoch of both models.
    curves = records.load_curves(root, SPEC, "toy")
    assert len(curves) == 2 * len(seeds) * section["epochs"] and {c["model"] for c in curves} == {"model", "weight-blind"}
    assert [c["value"] for c in curves if c["model"] == "model" and c["seed"] == 0] == model[0]["by_member"]["sum"]["train_loss"]


def test_contract_negative_control_the_baseline_as_the_model_did_not_learn(made):
    section, seeds, root, model, blind = made
    swapped = _table(root, "blind", "blind", seeds)  # the baseline's records passed off as the model's
    learned, _ = rep.learned_from_row(swapped.iloc[0].to_dict())
    assert learned == "no" and rep.gate(learned, rep.Scale("toy", True)) == "did not learn"
    with pytest.raises(ValueError, match="epochs: model 25, baseline 24"):
        ab.check_budget(model[0]["budget"], dict(blind[0]["budget"], epochs=24))


def test_contract_experiment_and_data_modules_stay_within_400_lines():
    """What a trained experiment owns stays small: every module under experiments/ and data/ is at most 400 lines
    (shared concerns live in the shared layer; docs/architecture.md lists where)."""
    src = REPO_ROOT / "src" / "algo_emu"
    sizes = {str(p.relative_to(src)): len(p.read_text().splitlines())
             for d in ("experiments", "data") for p in sorted((src / d).glob("*.py"))}
    assert len(sizes) >= 15 and "experiments/ames.py" in sizes
    assert {k: v for k, v in sizes.items() if v > 400} == {}
