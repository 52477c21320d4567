"""E1's settings and headline quantities, importable without torch (the workflow parses this).

Two protocols (``heads.protocols``), each with its own headline quantity:

* ``published``: one data set and target head for all seeds, the code's softmax
  axis (``reference_code``), the mean of per-batch means; heads sweep and
  prompt-length sweep;
* ``independent``: a data set and head per seed, ``heads.target``, the exact
  mean; heads sweep.
"""

from __future__ import annotations

PROTOCOLS = ("published", "independent")
METRICS = {"exact": "mse", "batchmean": "mse_batchmean"}  # metric name -> column of the runs table
METRIC_LABELS = {"exact": "exact mean", "batchmean": "mean of per-batch means"}


def headline(protocol: str, params: dict) -> tuple[str, str]:
    """(target definition, metric) a protocol reports as its headline."""
    if protocol == "published":
        return "reference_code", "batchmean"  # the code's softmax axis, mean of per-batch means
    if protocol == "independent":
        return params["target"], "exact"
    raise ValueError(f"heads.protocols: unknown protocol {protocol!r} (expected one of {PROTOCOLS})")


def p_sweep_protocol(params: dict) -> str:
    """The protocol the prompt-length sweep runs under: published when it is configured."""
    return "published" if "published" in params["protocols"] else "independent"


def settings(params: dict) -> list[tuple[str, int, int]]:
    """All (protocol, H, p) settings, deduplicated (H=1, p=60 belongs to both sweeps).

    published: the heads sweep and the prompt-length sweep; independent: the heads
    sweep (and the prompt-length sweep only when published is not configured)."""
    out = []
    for protocol in params["protocols"]:
        out += [(protocol, H, params["p_heads_sweep"]) for H in params["heads_sweep"]]
        if protocol == p_sweep_protocol(params):
            out += [(protocol, params["heads_p_sweep"], p) for p in params["p_sweep"]]
    return list(dict.fromkeys(out))


def setting_name(H: int, p: int) -> str:
    return f"H{H}_p{p}"


# --------------------------------------------------------------------------- variants (ours, never paper-comparable)

#: Keys a variant (``heads.variants``) may override; every other training key is the section's.
VARIANT_OVERRIDES = ("epochs", "lr", "lr_schedule", "eval_every")


def variants(params: dict) -> list[dict]:
    """The configured variants (``heads.variants``), in config order."""
    return list(params.get("variants") or [])


def variant(params: dict, name: str) -> dict:
    for v in variants(params):
        if v["name"] == name:
            return v
    raise KeyError(f"heads.variants: no variant named {name!r} (configured: {[v['name'] for v in variants(params)]})")


def variant_protocol(v: dict) -> str:
    return v.get("protocol", "published")


def variant_train_params(params: dict, name: str) -> dict:
    """The ``--params`` of variant ``name``'s training job: the keys the heads train step reads in the variant's
    protocol, the variant's overrides in place of the section's values. A key a variant overrides is not read from
    the section, so editing that section key leaves the variant's params (its rerun trigger) unchanged."""
    from algo_emu.experiments.step_keys import step_params

    v = variant(params, name)
    merged = dict(params) | {k: v[k] for k in VARIANT_OVERRIDES if k in v}
    return step_params(merged, "heads", "train", variant_protocol(v))
