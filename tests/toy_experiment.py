"""A toy trained experiment from outside the package (docs/architecture.md: the contract of a new experiment). It
owns this module (spec, config check, task, steps, verdict rule, report rows), its rules (toy.smk) and its section's
schema (toy.schema.yaml). ``ALGO_EMU_SPECS=toy_experiment`` makes it what ``snakemake all`` runs: model and weight-blind
baseline, frozen evaluation with prompt ablations, records, table, figure, report section, manifest (test_contract)."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import torch

from algo_emu import ablation as ab
from algo_emu.frozen import FrozenFile, save_frozen
from algo_emu.models.emulator import EnsembleEmulator
from algo_emu.rng import torch_stream
from algo_emu.specs import FIGURES, TABLES, ConfigError, Reads, Report, Rule, Spec, Target
from algo_emu.tables import KEY, last, load_runs, RunSpec, summarise_by, write_table
from algo_emu.train import Member, Runner, train_config

HERE = Path(__file__).resolve().parent
KEYS = ("n_prompts", "n_tokens", "d", "hidden", "heads", "epochs", "batch_size", "lr", "checkpoint_every", "compile",
        "lr_schedule", "attention")


def check(section: dict, config: dict) -> None:  # cross-field checks, after its schema's (with the other sections')
    if section["hidden"] % section["heads"]:
        raise ConfigError(f"toy.heads: {section['heads']} heads do not divide toy.hidden = {section['hidden']}")


SPEC = Spec(section="toy", label="E7", reads=(Reads("toy", "train", KEYS),),
            targets=(Target("toy_table", "E7", "the toy's table", (TABLES + "toy.{csv,md,tex}",)),
                     Target("toy_figure", "E7", "the toy's figure", (FIGURES + "toy.{pdf,png}",))),
            rule_files=(str(HERE / "toy.smk"),), module=__name__, schema=str(HERE / "toy.schema.yaml"),
            report=Report("E7 -- a toy: the sum of the weights in the prompt", __name__, ("toy.csv",)), check=check)
PARAMS_OF = {"train": "train"}  # the steps whose `params` the command line checks against SPEC.reads
RULES = (Rule("toy", "supported | partly supported | not supported", "MSE / weight-blind MSE <= 0.05 | <= 0.2 | above"),)


def layout(section: dict) -> ab.PromptLayout:  # token i = [x_i; w]
    return ab.PromptLayout("toy", d_in=2 * section["d"], weights=((section["d"], 2 * section["d"]),))


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


def train(params: dict, seeds: list[int], out_dir: str, blind: bool = False, device_spec: str = "cpu",
          threads: int | None = None) -> dict[int, dict]:
    """Train the model (or its weight-blind baseline), evaluate it frozen with the prompt ablations, write records."""
    section, out = params, Path(out_dir)
    runner, task, lay = Runner(device_spec, threads), ToyTask(seeds, section), layout(section)
    meta = {"d_in": lay.blind().d_in if blind else lay.d_in, "seeds": seeds, "blind": blind}

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


RUNS = RunSpec(  # the records as table rows
    experiment="toy", rows="by_member",
    columns={"member": KEY, "d": "setting.d", "seed": "seed", "mse": "@.mse",
             "final_train_loss": last("@.train_loss"), "config_hash": "config_hash"},
    setting=("member", "d"), metrics=("mse", "final_train_loss"), records="*/seed*/metrics.json",
    curves=lambda r: [(f"d={r['setting']['d']}", "weight-blind" if r["weight_blind"] else "model", epoch, "train loss", v)
                      for m in r["by_member"].values() for epoch, v in enumerate(m["train_loss"], start=1)])


def table(model: list[str], blind: list[str]) -> pd.DataFrame:
    """Held-out MSE per member over seeds, and over the weight-blind baseline's."""
    runs, base = load_runs(model, RUNS), load_runs(blind, RUNS)
    out = summarise_by(runs, ["member"], ["mse"])
    return out.assign(mse_over_blind=out.mse_mean / summarise_by(base, ["member"], ["mse"]).mse_mean)


def aggregate(model: list[str], blind: list[str], out_csv: str) -> None:
    write_table(table(model, blind), out_csv, "Toy: held-out MSE over seeds and its ratio to the weight-blind model's.")


def figure(table: str, out: str) -> None:
    from algo_emu.plots import OURS_COLOR, figure as new_figure, save_figure

    t = pd.read_csv(table)
    with new_figure() as (fig, ax):
        ax.bar(t.member, t.mse_mean, color=OURS_COLOR)
        ax.set(ylabel="held-out MSE", title="toy")
        save_figure(fig, out)


STEPS = {"train": train, "aggregate": aggregate, "figure": figure}


def report_rows(tables: Path, config: dict, config_name: str) -> list:
    """Rule [learned] (it must beat its weight-blind baseline), then its own rule [toy]."""
    from algo_emu.report import replication as rep

    scale, out = rep.Scale(f"{config_name}: toy", True), []
    for r in pd.read_csv(tables / "toy.csv").to_dict("records"):
        learned, why = rep.learned_from_row(r)
        verdict = rep.gate(learned, scale) or rep.graded(r["mse_over_blind"], 0.05, 0.2, scale)
        out.append(rep.Row("E7", "the model reads w from its prompt", f"member {r['member']}", comparable_mode="toy",
                           comparable_mean=r["mse_mean"], learned=learned, scale=scale.text, verdict=verdict,
                           reason=f"{why}; {rep.cite('learned' if verdict == 'did not learn' else 'toy')}"))
    return out
