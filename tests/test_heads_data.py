"""E1 data and target definitions."""

import json

import pytest
import torch

from algo_emu.data import heads as hd


def test_paper_target_normalises_columns_and_code_target_rows():
    S = torch.randn(5, 7, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    A = hd.attention_weights(S, "paper")
    torch.testing.assert_close(A.sum(dim=-2), torch.ones(5, 7, dtype=torch.float64))  # columns (over keys j)
    assert not torch.allclose(A.sum(dim=-1), torch.ones(5, 7, dtype=torch.float64))
    R = hd.attention_weights(S, "reference_code")
    torch.testing.assert_close(R.sum(dim=-1), torch.ones(5, 7, dtype=torch.float64))
    with pytest.raises(ValueError, match="unknown target definition 'rows'"):
        hd.attention_weights(S, "rows")


def test_head_output_by_hand():
    # two tokens, d = 1: k = (0, log 3), q = (1, 0), v = (1, 5)
    K = torch.tensor([[0.0], [torch.log(torch.tensor(3.0))]], dtype=torch.float64)
    Q = torch.tensor([[1.0], [0.0]], dtype=torch.float64)
    V = torch.tensor([[1.0], [5.0]], dtype=torch.float64)
    # S[j, i] = k_j q_i = [[0, 0], [log 3, 0]]
    # paper: softmax over j per query i: i=0 -> (1/4, 3/4) -> 1/4 + 15/4 = 4; i=1 -> (1/2, 1/2) -> 3
    torch.testing.assert_close(hd.head_output(K, Q, V, "paper"), torch.tensor([[4.0], [3.0]], dtype=torch.float64))
    # code: softmax over i per key j: row 0 -> (1/2, 1/2); row 1 -> (3/4, 1/4); Y_i = sum_j A[j, i] v_j
    torch.testing.assert_close(hd.head_output(K, Q, V, "reference_code"),
                               torch.tensor([[0.5 + 15 / 4], [0.5 + 5 / 4]], dtype=torch.float64))


def test_generate_distribution_and_determinism():
    a = hd.generate(4, 4000, 5, 6, 12)
    b = hd.generate(4, 4000, 5, 6, 12)
    c = hd.generate(5, 4000, 5, 6, 12)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["X"], c["X"]) and not torch.equal(a["W_K"], c["W_K"])
    assert a["X"].shape == (4000, 5, 6) and a["W_K"].shape == (12, 6) and a["W_V"].shape == (6, 6)
    assert abs(a["X"].mean().item() + 1) < 0.02 and abs(a["X"].var().item() - 4) < 0.05  # 2z - 1


def test_split_is_a_partition_shared_per_seed():
    tr, te = hd.split(3, 100, 0.2)
    assert len(te) == 20 and len(tr) == 80
    assert sorted(torch.cat([tr, te]).tolist()) == list(range(100))
    assert torch.equal(hd.split(3, 100, 0.2)[1], te) and not torch.equal(hd.split(4, 100, 0.2)[1], te)


def test_dataset_sidecar_and_checksum(tmp_path, heads_params):
    path = tmp_path / "d.pt"
    meta = hd.write_dataset(path, 2, heads_params)
    side = json.loads(hd.sidecar(path).read_text())
    assert side == json.loads(json.dumps(meta)) and side["seed"] == 2 and len(side["sha256"]) == 64
    assert torch.equal(hd.load_dataset(path, heads_params)["X"], hd.generate(2, 48, 4, 3, 6)["X"])
    with pytest.raises(ValueError, match="generated with params.n_prompts=48, this job needs 50; rerun the data rule"):
        hd.load_dataset(path, heads_params | {"n_prompts": 50})
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="does not match its sidecar"):
        hd.load_dataset(path)
