"""A tiny decoder-only transformer whose hand-written softmax overflows float16.

What fails, why, and why the learning rate decays: docs/workloads.md (``tiny_transformer``).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from ampsweep.jobs import Workload

VOCAB = 32


class NaiveSoftmax(nn.Cell):
    """Causal softmax over the last axis, written as ``exp(s) / sum(exp(s))``."""

    def __init__(self, seq_len: int) -> None:
        super().__init__()
        self.future = Tensor(np.triu(np.ones((seq_len, seq_len), np.bool_), k=1))

    def construct(self, scores: Tensor) -> Tensor:
        # -1e4 is finite in float16, and exp of it is exactly 0 in both precisions
        weights = ops.exp(scores.masked_fill(self.future, -1e4))
        return weights / weights.sum(-1, keepdims=True)


class Attention(nn.Cell):
    """Multi-head causal self-attention with scaled dot-product scores."""

    def __init__(self, width: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = width // heads
        self.scale = self.head_dim**-0.5
        self.qkv = nn.Dense(width, 3 * width)
        self.softmax = NaiveSoftmax(seq_len)
        self.out = nn.Dense(width, width)

    def construct(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape
        qkv = self.qkv(x).reshape(batch, length, 3, self.heads, self.head_dim).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = ops.matmul(q, k.swapaxes(-1, -2)) * self.scale
        mixed = ops.matmul(self.softmax(scores), v)
        return self.out(mixed.transpose(0, 2, 1, 3).reshape(batch, length, width))


class Block(nn.Cell):
    """Pre-norm transformer block: attention, then a GELU MLP, each with a residual."""

    def __init__(self, width: int, heads: int, seq_len: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm((width,))
        self.attn = Attention(width, heads, seq_len)
        self.norm2 = nn.LayerNorm((width,))
        self.mlp = nn.SequentialCell(nn.Dense(width, 4 * width), nn.GELU(), nn.Dense(4 * width, width))

    def construct(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Cell):
    """Token ids ``[batch, seq]`` -> next-token logits ``[batch * seq, vocab]``."""

    def __init__(self, vocab: int, seq_len: int, width: int, heads: int, layers: int) -> None:
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, width)
        positions = np.random.normal(0.0, 0.02, (seq_len, width)).astype(np.float32)
        self.positions = Parameter(Tensor(positions), name="positions")
        self.blocks = nn.CellList([Block(width, heads, seq_len) for _ in range(layers)])
        self.norm = nn.LayerNorm((width,))
        self.head = nn.Dense(width, vocab)

    def construct(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.positions
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).reshape(-1, self.vocab)


def batches(seed: int, batch_size: int, seq_len: int, period: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of ``(tokens, next tokens flattened)``.

    Each sequence is a random motif of ``period`` tokens repeated; the label
    is the sequence shifted by one, flattened to match the logits.
    """
    rng = np.random.default_rng(seed)
    repeats = -(-(seq_len + 1) // period)
    while True:
        motifs = rng.integers(0, VOCAB, (batch_size, period))
        tokens = np.tile(motifs, (1, repeats))[:, : seq_len + 1].astype(np.int32)
        yield tokens[:, :-1], tokens[:, 1:].reshape(-1)


def make(
    seed: int,
    width: int = 32,
    heads: int = 2,
    layers: int = 1,
    seq_len: int = 16,
    period: int = 4,
    batch_size: int = 8,
    learning_rate: float = 1e-2,
    half_life: int = 100,
) -> Workload:
    """The workload factory (docs/workloads.md says what fails and why)."""

    def optimizer(params: list) -> nn.Adam:  # the decay keeps FP32's scores far below 88 (docs/workloads.md)
        return nn.Adam(params, learning_rate=nn.ExponentialDecayLR(learning_rate, 0.5, half_life))

    return Workload(
        network=TinyTransformer(VOCAB, seq_len, width, heads, layers),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=optimizer,
        batches=batches(seed, batch_size, seq_len, period),
        target_loss=0.9,
    )
