import copy

import pytest
import torch

TINY_HEADS = {
    "n_prompts": 48, "n_tokens": 4, "d": 3, "target_hidden": 6, "hidden": 12,
    "heads_sweep": [1, 2], "p_heads_sweep": 7, "p_sweep": [4, 7], "heads_p_sweep": 1,
    "epochs": 2, "batch_size": 8, "lr": 1e-3, "test_fraction": 0.25, "target": "paper",
    "eval_batch_size": 5, "eval_every": 0, "checkpoint_every": 1, "compile": False, "attention": "auto",
}


@pytest.fixture
def heads_params():
    return copy.deepcopy(TINY_HEADS)


@pytest.fixture(autouse=True)
def _single_thread():
    # Deterministic, and fair to the other tests running on 2 cores.
    torch.set_num_threads(1)
    yield
