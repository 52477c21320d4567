import pytest
import torch


@pytest.fixture(autouse=True)
def _single_thread():
    # Deterministic, and fair to the other tests running on 2 cores (as tests/conftest.py).
    torch.set_num_threads(1)
    yield
