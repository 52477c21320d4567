"""Run the paper's published code (MAGICS-LAB/algo_emu at commit 6d39297) beside this pipeline: a cross-check
of the implementation, not part of the artifact.

None of the published code is in this repository. This script imports it from a checkout the user makes
(``--authors``) and calls its own functions, changing only what is listed in :data:`CHANGES`; every number it
prints is written to a small JSON record per run under ``--out``, resumable (a run whose record exists is skipped).

    git clone https://github.com/MAGICS-LAB/algo_emu /tmp/algo_emu && git -C /tmp/algo_emu checkout 6d39297
    python tools/crosscheck/published.py --authors /tmp/algo_emu e1 --heads 4 6 --seeds 1234 1235 1236
    python tools/crosscheck/published.py --authors /tmp/algo_emu e3                   # data seed 0
    python tools/crosscheck/published.py --authors /tmp/algo_emu --data-seed 1 e3    # a second model, and so on
    python tools/crosscheck/published.py --authors /tmp/algo_emu --device cuda e3 --probe   # then without --probe
    python tools/crosscheck/published.py --authors /tmp/algo_emu e4
    python tools/crosscheck/published.py table      # the records as one table beside ours

Records: ``tools/crosscheck/records/<experiment>_<setting>.json`` (the per-epoch losses the code prints, its final
numbers, wall time, thread count, torch version and the published commit).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
COMMIT = "6d39297"
#: Every change made to run the published code, as the records and the page state them.
CHANGES = {
    "e1": [
        "attn_sim_attn.head_experiment is called with head_list = [H] and seeds = [s], one (H, seed) at a time (the "
        "script's main() loops the p sweep, then H in [1, 2, 4, 6, 8, 12] over seeds 1234..1244)",
        "the data set (SimAttentionDataset(50000, 20, 24, 48), drawn by the script before any seed is set) is drawn "
        "after torch.manual_seed(data_seed) so that a rerun gives the same data set; one data set per process, shared "
        "by its H and seeds as in the script",
        "the p sweep (p_experiment) is not run",
        "CPU, torch.set_num_threads(threads)",
    ],
    "e3": [
        "att_sim_statistical.main() is called as published (H = 6, 300 epochs, one unseeded model, five evaluation "
        "seeds 42..46); torch.manual_seed(data_seed) and random.seed(data_seed) (its data set draws each prompt's "
        "algorithm with random.choice) are set before it so that a rerun gives the same data and model",
        "save_model / load_frozen_model write and read the model in --out's folder instead of the hard-coded "
        "/home/ubuntu/att_sim_att/mixed_trained_attention.pth",
        "CPU, torch.set_num_threads(threads); or, with --device cuda, torch.set_default_device('cuda') (every tensor "
        "and parameter the code makes is made there) and the DataLoader's shuffle given a generator on that device "
        "(its default CPU generator cannot draw a permutation on the GPU)",
    ],
    "e4": [
        "att_sim_statistical_ames_data.main() is called as published; its failure is recorded",
        "then the script's model is built with main()'s own values (input_dim 262, hidden 2 x 262, 8 heads, p 100) "
        "without the data download, to record whether it can be built at all",
    ],
}


def _import(authors: Path, module: str):
    sys.path.insert(0, str(authors))
    import importlib

    return importlib.import_module(module)


def _authors_commit(authors: Path) -> str:
    out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=authors, capture_output=True, text=True)
    return out.stdout.strip() or "unknown (not a git checkout)"


def _env(threads: int, device: str = "cpu") -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if device.startswith("cuda") else None
    return {"torch": torch.__version__, "python": platform.python_version(), "threads": threads,
            "device": device, "gpu": gpu, "machine": platform.machine(), "processor": platform.processor() or None}


@contextlib.contextmanager
def _on_device(mod, device: str):
    """Run the published code on ``device`` without editing it: tensors and parameters are made there by default,
    and the module's DataLoader shuffles with a generator on that device."""
    import torch

    if device == "cpu":
        yield
        return
    loader = mod.DataLoader

    def on_device_loader(*args, **kwargs):
        if kwargs.get("shuffle") and kwargs.get("generator") is None:
            kwargs["generator"] = torch.Generator(device=device)
            kwargs["generator"].manual_seed(int(torch.randint(0, 2**62, (), device="cpu")))
        return loader(*args, **kwargs)

    torch.set_default_device(device)
    mod.DataLoader = on_device_loader
    try:
        yield
    finally:
        mod.DataLoader = loader
        torch.set_default_device("cpu")


def _write(path: Path, rec: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rec, indent=2, sort_keys=True) + "\n")
    with open(tmp) as fh:
        os.fsync(fh.fileno())
    os.replace(tmp, path)


class _Tee(io.TextIOBase):
    """stdout to the terminal and to a buffer (the published code reports by print)."""

    def __init__(self, stream):
        self.stream, self.buf = stream, io.StringIO()

    def write(self, s):
        self.stream.write(s)
        self.stream.flush()
        return self.buf.write(s)


def _floats(pattern: str, text: str) -> list[float]:
    return [float(m) for m in re.findall(pattern, text)]


def run_e1(args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    todo = [(H, s) for H in args.heads for s in args.seeds
            if not (RECORDS / f"e1_H{H}_seed{s}.json").is_file()]
    if not todo:
        print("e1: every record exists")
        return
    mod = _import(args.authors, "attn_sim_attn")
    torch.manual_seed(args.data_seed)
    t0 = time.time()
    dataset = mod.SimAttentionDataset(50_000, 20, 24, 48)
    data_seconds = time.time() - t0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    for H, seed in todo:
        tee = _Tee(sys.stdout)
        t0 = time.time()
        cwd = os.getcwd()
        os.chdir(work)  # head_experiment writes head_experiment_results.csv into the working folder
        try:
            with contextlib.redirect_stdout(tee):
                mod.head_experiment(head_list=[H], seeds=[seed], dataset=dataset, seq_len=20, hidden_dim=48,
                                    batch_size=32, learning_rate=0.001, sub_epochs=args.epochs)
        finally:
            os.chdir(cwd)
        log = tee.buf.getvalue()
        final = _floats(r"→ Test Loss=([0-9.eE+-]+)", log)
        kqv = re.findall(r"Test Loss_k=([0-9.]+)\s+Test Loss_q=([0-9.]+)\s+Test Loss_v=([0-9.]+)", log)
        train = re.findall(r"Epoch (\d+)/\d+\s+Loss_k=([0-9.]+)\s+Loss_q=([0-9.]+)\s+Loss_v=([0-9.]+)", log)
        _write(RECORDS / f"e1_H{H}_seed{seed}.json", {
            "experiment": "E1", "script": "attn_sim_attn.py", "published_commit": _authors_commit(args.authors),
            "heads": H, "p": 60, "seed": seed, "epochs": args.epochs, "data_seed": args.data_seed,
            "test_mse": final[-1], "test_kqv": [float(x) for x in kqv[-1]] if kqv else None,
            "train_kqv_per_epoch": [[int(e), float(k), float(q), float(v)] for e, k, q, v in train],
            "seconds": round(time.time() - t0, 1), "data_seconds": round(data_seconds, 1),
            "changes": CHANGES["e1"], "environment": _env(args.threads)})


def probe_e3(mod, device: str) -> None:
    """A short run of the published E3 classes on ``device`` (512 prompts, 2 epochs, the script's shapes): the
    mechanics of --device checked in seconds before the 300-epoch run."""
    import torch

    t0 = time.time()
    with _on_device(mod, device):
        data = mod.SimStatsDataset(num_samples=512, seq_len=20, input_dim=24, prompt_dim=24, algorithm="mixed")
        model = mod.OneLayerAttention(input_dim=24, hidden_dim=48, prompt_dim=24, seq_len=20, number_of_heads=6, p=60)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        losses = []
        for _ in range(2):
            for x, y, w in mod.DataLoader(data, batch_size=32, shuffle=True):
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(model(x, w), y)
                loss.backward()
                opt.step()
            losses.append(float(loss.detach()))
        where = next(model.parameters()).device
    print(json.dumps({"probe": "e3", "device": str(where), "last_batch_loss_per_epoch": losses,
                      "seconds": round(time.time() - t0, 2), "environment": _env(1, device)}))


def run_e3(args) -> None:
    import random

    import torch

    torch.set_num_threads(args.threads)
    mod = _import(args.authors, "att_sim_statistical")
    if args.probe:
        probe_e3(mod, args.device)
        return
    path = RECORDS / f"e3_H6_data{args.data_seed}.json"
    if path.is_file():
        print(f"e3: {path} exists")
        return
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    model_file = work / f"e3_H6_data{args.data_seed}.pth"
    save, load = mod.save_model, mod.load_frozen_model
    mod.save_model = lambda model, _path: save(model, str(model_file))
    mod.load_frozen_model = lambda path, *a, **k: load(str(model_file), *a, **k)
    torch.manual_seed(args.data_seed)
    random.seed(args.data_seed)
    tee = _Tee(sys.stdout)
    t0 = time.time()
    with contextlib.redirect_stdout(tee), _on_device(mod, args.device):
        mod.main()
    log = tee.buf.getvalue()
    train = _floats(r"\[Mixed Train\] Epoch \d+/\d+ - Loss: ([0-9.eE+-]+)", log)
    per_task = {t: _floats(rf"Frozen model → {t} Test Loss: ([0-9.eE+-]+)", log) for t in ("lasso", "linear", "ridge")}
    summary = {t.lower(): [float(m), float(s)] for t, m, s in
               re.findall(r"(\w+) → Mean ± Std = ([0-9.]+) ± ([0-9.]+)", log)}
    _write(path, {
        "experiment": "E3", "script": "att_sim_statistical.py", "published_commit": _authors_commit(args.authors),
        "heads": 6, "p": 60, "epochs": len(train), "data_seed": args.data_seed, "train_loss_per_epoch": train,
        "test_loss_per_eval_seed": per_task, "mean_std_printed": summary,
        "note": "the printed std is numpy's default (ddof = 0) over the five evaluation seeds of one model",
        "seconds": round(time.time() - t0, 1), "changes": CHANGES["e3"], "environment": _env(args.threads, args.device)})


def run_e4(args) -> None:
    mod = _import(args.authors, "att_sim_statistical_ames_data")
    out = {"experiment": "E4", "script": "att_sim_statistical_ames_data.py",
           "published_commit": _authors_commit(args.authors), "changes": CHANGES["e4"]}
    try:
        mod.main()
        out["main"] = "ran to the end"
    except BaseException as e:  # noqa: BLE001  (recorded, whatever it is)
        out["main"] = f"{type(e).__name__}: {e}"
        out["main_traceback_tail"] = traceback.format_exc().strip().splitlines()[-6:]
    try:
        mod.OneLayerAttention(input_dim=262, hidden_dim=2 * 262, prompt_dim=262, seq_len=1, number_of_heads=8, p=100)
        out["model_with_main_values"] = "built"
    except BaseException as e:  # noqa: BLE001
        out["model_with_main_values"] = f"{type(e).__name__}: {e}"
    out["environment"] = _env(1)
    _write(RECORDS / "e4.json", out)
    print(json.dumps(out, indent=2))


def main(argv=None) -> None:
    global RECORDS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--authors", type=Path, help="a checkout of MAGICS-LAB/algo_emu at commit 6d39297")
    ap.add_argument("--work", default=str(HERE / "work"), help="scratch folder for files the code writes")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data-seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, or cuda for E3 (see CHANGES['e3'])")
    ap.add_argument("--records", type=Path, default=RECORDS, help="where the JSON records go")
    sub = ap.add_subparsers(dest="cmd", required=True)
    e1 = sub.add_parser("e1")
    e1.add_argument("--heads", type=int, nargs="+", default=[4, 6])
    e1.add_argument("--seeds", type=int, nargs="+", default=[1234, 1235, 1236])
    e1.add_argument("--epochs", type=int, default=50)
    e3 = sub.add_parser("e3")
    e3.add_argument("--probe", action="store_true", help="a few seconds' run of the E3 classes on --device")
    sub.add_parser("e4")
    sub.add_parser("table")
    args = ap.parse_args(argv)
    RECORDS = args.records
    if args.cmd != "table" and args.authors is None:
        ap.error("--authors is required to run the published code")
    if args.cmd == "table":
        from table import main as table_main  # noqa: PLC0415  (tools/crosscheck/table.py)

        table_main()
        return
    {"e1": run_e1, "e3": run_e3, "e4": run_e4}[args.cmd](args)


if __name__ == "__main__":
    main()
