"""The small causal transformer of E6, built from torch.nn.TransformerEncoder.

Token i (i = 0..n-1) carries the previous complete example and the current input:
``[x_i, x_{i-1}, y_{i-1}, 1{i>0}]`` (zeros for i = 0). With a causal mask the output at token i sees
examples 0..i-1 and x_i, so it predicts y_i from a prompt with k = i examples: one sequence of K+1 tokens
trains every k = 0..K at once (the Garg et al. objective), and the prediction at the last token of a
sequence of k+1 tokens is the prediction for a k-shot prompt. Pre-norm encoder layers (GELU, no dropout),
learned positional embeddings (K+1 positions: a longer prompt is refused, never extrapolated).
"""

from __future__ import annotations

import torch
from torch import nn


def encode(X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Tokens [x_i, x_{i-1}, y_{i-1}, has_prev] from X (B, n, d) and y (B, n) (y's last entry is never used)."""
    B, n, d = X.shape
    prev_x = torch.zeros_like(X)
    prev_y = torch.zeros(B, n, 1, dtype=X.dtype, device=X.device)
    flag = torch.zeros(B, n, 1, dtype=X.dtype, device=X.device)
    if n > 1:
        prev_x[:, 1:] = X[:, :-1]
        prev_y[:, 1:, 0] = y[:, :-1]
        flag[:, 1:] = 1.0
    return torch.cat([X, prev_x, prev_y, flag], dim=-1)


class ICLTransformer(nn.Module):
    def __init__(self, d: int, k_max: int, d_model: int = 64, layers: int = 4, heads: int = 4, ff: int = 256):
        super().__init__()
        if d_model % heads:
            raise ValueError(f"essay.model.heads: {heads} heads do not divide d_model = {d_model}")
        self.d, self.k_max = int(d), int(k_max)
        self.embed = nn.Linear(2 * d + 2, d_model)
        self.pos = nn.Embedding(k_max + 1, d_model)
        layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=ff, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 1)

    def forward(self, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Predictions (B, n): entry i is the model's y_i given examples 0..i-1 and x_i."""
        n = X.shape[1]
        if n > self.k_max + 1:
            raise ValueError(f"prompt with k = {n - 1} examples exceeds the trained context k_max = {self.k_max}")
        if X.shape[-1] != self.d:
            raise ValueError(f"inputs have d = {X.shape[-1]}, the model was trained with d = {self.d}")
        h = self.embed(encode(X, y)) + self.pos.weight[:n]
        mask = nn.Transformer.generate_square_subsequent_mask(n, device=X.device, dtype=h.dtype)
        h = self.encoder(h, mask=mask, is_causal=True)
        return self.head(self.norm(h))[..., 0]
