"""A tiny decoder-only transformer whose hand-written softmax overflows in float16.

The model is a small GPT: token embedding plus learned positions, one
pre-norm block (``nn.LayerNorm``, two-head causal self-attention, a GELU
MLP), a final ``nn.LayerNorm`` and a vocabulary head, trained for next-token
prediction with ``nn.SoftmaxCrossEntropyWithLogits`` on the flattened logits.
The attention weights come from ``NaiveSoftmax``, the textbook
``exp(s) / sum(exp(s))``, without subtracting the row maximum first. The
data are random 4-token motifs repeated along each sequence, so every token
after the first motif can be copied from 4 positions back.

Why float16 breaks, with no injected NaN and no branch on the AMP level:
copying one position out of up to 16 rewards attention that is close to
one-hot, so training drives the score of the attended position from about 2
at initialisation to 15-20 within 30-50 steps. Without the max subtraction
``exp`` sees those scores directly. In float32 that is harmless (``exp``
overflows only past 88). In float16 (O2 casts ``NaiveSoftmax`` because
MindSpore's default black list only knows ``nn.BatchNorm*`` and
``nn.LayerNorm``; O3 casts everything) ``exp`` overflows 65504 past 11.09;
the row sum is then ``inf`` too and ``inf / inf`` is NaN. GELU passes the
NaN on (ReLU would hide it as zeros), the loss turns NaN after 20-40 steps
and stays NaN, because the NaN gradients have reached the weights. Keeping
LayerNorm or the loss in FP32 does not help: the overflow is in the
attention. O1 trains, because it only casts the white list (Dense and the
matmuls) and the ``exp`` stays in FP32.

Keeping ``NaiveSoftmax`` in FP32 (``black_list=[NaiveSoftmax]``) fixes it:
the scores may still be computed in float16, whose range is far beyond 20;
only ``exp`` needs float32's range. Black-listing ``Attention`` works too, at
the cost of running its matmuls in FP32. (In the model's own code the fix is
the max subtraction that ``ops.softmax`` does.)

The learning rate halves every 100 steps. With a constant rate Adam's
normalised steps keep sharpening the attention after the loss has converged,
and on some seeds the scores run past 88 within 300 steps even in FP32; the
decay bounds how far the weights can move, so in FP32 the largest score stays
below about 22 for at least 600 steps. The loss cannot fall below
``3/16 * ln 32 = 0.65``: the first three targets of each sequence are random.
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
    """The workload factory (see the module docstring for what fails and why)."""

    def optimizer(params: list) -> nn.Adam:
        return nn.Adam(params, learning_rate=nn.ExponentialDecayLR(learning_rate, 0.5, half_life))

    return Workload(
        network=TinyTransformer(VOCAB, seq_len, width, heads, layers),
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=optimizer,
        batches=batches(seed, batch_size, seq_len, period),
        target_loss=0.9,
    )
