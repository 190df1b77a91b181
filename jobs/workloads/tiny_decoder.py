"""A Llama-style decoder whose precision is set by mindformers' own config fields; O2 breaks it in RMSNorm.

The model has mindformers' Llama shape and names, small: ``tok_embeddings``
(``nn.Embedding``), ``layers`` of ``attention_norm -> attention -> residual,
ffn_norm -> feed_forward -> residual``, a final ``norm`` and ``lm_head``.
Every projection is an ``nn.Dense`` without bias; the attention is causal and
multi-head, with rotary position embedding on queries and keys; the feed-forward
is SwiGLU (``w2(silu(w1 x) * w3 x)``). ``RMSNorm`` is a Cell of ours: MindSpore
has no RMSNorm layer in ``nn``, and ``ops.rms_norm`` has no CPU kernel in 2.10
("The kernel RmsNorm unregistered") nor in 2.7.0 ("Not found op ... RmsNorm
on device CPU"). It trains on
next-token cross-entropy over a deterministic synthetic token stream: a
seeded Markov chain in which every token has two equally likely successors,
so the best possible loss is ln 2 = 0.69.

Its keyword arguments are mindformers' dtype fields, with mindformers' casts:

- ``compute_dtype``: the ``nn.Dense`` layers compute in it (``to_float``), and
  the embedding's output is cast to it, so the residual stream carries it.
- ``layernorm_compute_type``: RMSNorm casts its input to it for the mean of
  squares and the reciprocal square root; the scale factor is cast back.
- ``softmax_compute_type``: the scaled and masked attention scores are cast
  to it for the softmax; the probabilities are cast back.
- ``rotary_dtype``: queries and keys are cast to it for the rotation.

Each takes ``"float16"``, ``"float32"`` or ``"bfloat16"`` (bfloat16 has no CPU
kernels in MindSpore). ``None``, the default, casts nothing: that part
computes in the dtype that reaches it, float32 under O0 and float16 under
O2. So under O0 with the defaults this is a true FP32 model, and O2 with the
defaults is what AMP alone does to it. An explicit ``"float32"`` holds under
O2 where the step is compiled (``mindspore.jit``, as ampsweep's trials are):
AMP casts a Cell's inputs, not what its ``construct`` casts itself. In
PyNative it does not: an O2-cast RMSNorm with float32 statistics returns 0
for a row of 300s in PyNative (float16's ``300^2`` is inf) and 1 under jit.
``compute_dtype`` does not hold under O2: O2's ``to_float(float16)`` on the
whole network overrides the Dense layers' own ``to_float`` (their outputs
are float16).

Why float16 breaks, with no injected NaN and no branch on the AMP level:
``nn.Embedding`` initialises its table with MindSpore's default, a normal
distribution of standard deviation 0.01 (as mindformers' ``LlamaEmbedding``
does with its default ``init_method_std``). The first RMSNorm sees rows whose
root mean square is about 0.01. Its forward is fine in float16 (the scale
factor ``rsqrt(mean(x^2))`` is about 100), but the backward of ``rsqrt`` is
``-0.5 * rsqrt(m)^3``, about -5e5, past float16's 65504. The gradient of the
embedding table is NaN at step 0 and the loss is NaN from step 1 on. Alone,
the fp16 RMSNorm's gradient is non-finite for inputs of standard deviation
0.03 and below, finite from 0.05 up: the default initialisation is three
times below that edge.

Measured with ``run_trial`` (MindSpore 2.10, CPU, jit; float16, no loss
scaling, no clip, ``abort_after`` 10, 200 steps; "loss" is the mean of the
last 20 steps, the target 1.0 is reached where the 20-step mean first drops
below it):

- O0, defaults (FP32): trains on seeds 0 / 1 / 2, from 4.27-4.34 to
  0.801 / 0.802 / 0.775; the target at steps 94 / 100 / 92.
- O2, defaults: the loss is NaN from step 1 on seeds 0, 1, 2.
- O2, ``layernorm_compute_type="float32"``: trains like O0 on seeds 0-2
  (0.801 / 0.802 / 0.775, the target at the same steps; the per-step losses
  differ from O0's by at most 0.001 over the first 30 steps).
- O2, ``softmax_compute_type="float32"``, and O2, ``rotary_dtype="float32"``:
  NaN from step 1 (seed 0), as with the defaults.
- O0, ``compute_dtype="float16"`` (mindformers' way, no AMP; the residual
  stream and so the norms' inputs are float16): NaN from step 1 on seeds
  0-2; with ``layernorm_compute_type="float32"`` as well it trains like FP32
  (0.801 / 0.802 / 0.775, the target at steps 94 / 100 / 92).
- O0, ``layernorm_compute_type="float16"``: NaN from step 1 (seed 0).
- O2, defaults, ``clip=1.0``: NaN from step 1 on seeds 0-2 (a NaN gradient
  has a NaN norm).
- O2, defaults, ``loss_scale`` ``dynamic`` or ``static:1024`` (seed 0): no
  NaN, but no training either: every step's gradient overflows, so every
  update is skipped and the loss stays at 4.27 for 200 steps.

On MindSpore 2.7.0 (seed 0, 60 steps) the same: O2 and O0 with
``compute_dtype="float16"`` are NaN from step 1; O0, O2 with
``layernorm_compute_type="float32"`` and O0 with both fields train (1.401
over the last 10 steps, each).

So the answer is ``layernorm_compute_type: float32``: only the statistics of
the five RMSNorms compute in float32; the Dense layers, the attention and
the feed-forward stay in float16.

``start_step``: batch ``n`` is drawn from its own generator, seeded with
``(seed, n)``, so a factory called with ``start_step=N`` first yields the
batch that a run from step 0 trains on at step N.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from ampsweep.jobs import Workload

#: the dtype names a precision argument accepts, as mindformers' YAML writes them
DTYPES: dict[str, ms.Type] = {"float16": ms.float16, "float32": ms.float32, "bfloat16": ms.bfloat16}
#: the factory's precision arguments: mindformers' field names
PRECISION_ARGS = ("compute_dtype", "layernorm_compute_type", "softmax_compute_type", "rotary_dtype")
#: added to the scores of future positions: far below any score, and finite in float16
MASKED = -10000.0
# distinct entropy for the two streams a seed draws: the chain's successor table and each step's batch
_TABLE, _BATCH = 0, 1


def parse_dtype(name: str, value: str | None) -> ms.Type | None:
    """The MindSpore dtype a precision argument names; None casts nothing."""
    if value is None:
        return None
    if value not in DTYPES:
        raise ValueError(f"tiny_decoder: {name}={value!r} is not a dtype; use one of {', '.join(DTYPES)}")
    return DTYPES[value]


def cast_to(x: Tensor, dtype: ms.Type | None) -> Tensor:
    """``x`` in ``dtype``, or unchanged where the argument was left unset."""
    return x if dtype is None else ops.cast(x, dtype)


def dense(inputs: int, outputs: int, compute_dtype: ms.Type | None) -> nn.Dense:
    """A bias-free projection computing in ``compute_dtype`` (mindformers' ``Linear``)."""
    layer = nn.Dense(inputs, outputs, has_bias=False)
    if compute_dtype is not None:
        layer.to_float(compute_dtype)
    return layer


class RMSNorm(nn.Cell):
    """``x * rsqrt(mean(x^2) + eps) * weight``, the statistics in ``compute_type`` (mindformers' ``LlamaRMSNorm``)."""

    def __init__(self, hidden: int, eps: float, compute_type: ms.Type | None) -> None:
        super().__init__()
        self.weight = Parameter(Tensor(np.ones(hidden, np.float32)), name="weight")
        self.eps = eps
        self.compute_type = compute_type

    def construct(self, x: Tensor) -> Tensor:
        original = x.dtype
        statistics = cast_to(x, self.compute_type)
        factor = ops.rsqrt(ops.mean(ops.square(statistics), -1, keep_dims=True) + self.eps)
        return x * ops.cast(factor, original) * ops.cast(self.weight, original)


def rotate_half(x: Tensor) -> Tensor:
    """``[a, b] -> [-b, a]`` over the last axis: the rotation's sine term."""
    half = x.shape[-1] // 2
    return ops.cat((-x[..., half:], x[..., :half]), -1)


class Attention(nn.Cell):
    """Causal multi-head self-attention with rotary position embedding on queries and keys."""

    def __init__(
        self,
        hidden: int,
        heads: int,
        seq_length: int,
        rope_theta: float,
        compute_dtype: ms.Type | None,
        softmax_compute_type: ms.Type | None,
        rotary_dtype: ms.Type | None,
    ) -> None:
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.wq = dense(hidden, hidden, compute_dtype)
        self.wk = dense(hidden, hidden, compute_dtype)
        self.wv = dense(hidden, hidden, compute_dtype)
        self.wo = dense(hidden, hidden, compute_dtype)
        self.scale = 1.0 / float(np.sqrt(self.head_dim))
        self.softmax_compute_type = softmax_compute_type
        self.rotary_dtype = rotary_dtype
        frequencies = 1.0 / rope_theta ** (np.arange(0, self.head_dim, 2) / self.head_dim)
        angles = np.outer(np.arange(seq_length), frequencies)
        angles = np.concatenate([angles, angles], -1)
        self.cos = Tensor(np.cos(angles).astype(np.float32))
        self.sin = Tensor(np.sin(angles).astype(np.float32))
        self.mask = Tensor(np.triu(np.full((seq_length, seq_length), MASKED, np.float32), 1))

    def rotary(self, x: Tensor) -> Tensor:
        """Rotate ``[batch, heads, time, head_dim]`` by position, in ``rotary_dtype``."""
        original = x.dtype
        h = cast_to(x, self.rotary_dtype)
        t = h.shape[2]
        cos = ops.cast(self.cos[:t], h.dtype)
        sin = ops.cast(self.sin[:t], h.dtype)
        return ops.cast(h * cos + rotate_half(h) * sin, original)

    def split_heads(self, x: Tensor) -> Tensor:
        b, t, _ = x.shape
        return x.reshape(b, t, self.heads, self.head_dim).transpose(0, 2, 1, 3)

    def construct(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q = self.rotary(self.split_heads(self.wq(x)))
        k = self.rotary(self.split_heads(self.wk(x)))
        v = self.split_heads(self.wv(x))
        scores = ops.matmul(q, k.swapaxes(-1, -2)) * self.scale
        scores = scores + ops.cast(self.mask[:t, :t], scores.dtype)
        probs = ops.cast(ops.softmax(cast_to(scores, self.softmax_compute_type), -1), v.dtype)
        return self.wo(ops.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, t, c))


class FeedForward(nn.Cell):
    """SwiGLU: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, hidden: int, ffn_hidden: int, compute_dtype: ms.Type | None) -> None:
        super().__init__()
        self.w1 = dense(hidden, ffn_hidden, compute_dtype)
        self.w3 = dense(hidden, ffn_hidden, compute_dtype)
        self.w2 = dense(ffn_hidden, hidden, compute_dtype)

    def construct(self, x: Tensor) -> Tensor:
        return self.w2(ops.silu(self.w1(x)) * self.w3(x))


class DecoderLayer(nn.Cell):
    """Pre-norm: ``x + attention(attention_norm(x))``, then ``+ feed_forward(ffn_norm(.))``."""

    def __init__(self, config: dict[str, Any], dtypes: dict[str, ms.Type | None]) -> None:
        super().__init__()
        hidden, eps, compute = config["hidden_size"], config["rms_norm_eps"], dtypes["compute_dtype"]
        self.attention_norm = RMSNorm(hidden, eps, dtypes["layernorm_compute_type"])
        self.attention = Attention(
            hidden,
            config["num_heads"],
            config["seq_length"],
            config["rope_theta"],
            compute,
            dtypes["softmax_compute_type"],
            dtypes["rotary_dtype"],
        )
        self.ffn_norm = RMSNorm(hidden, eps, dtypes["layernorm_compute_type"])
        self.feed_forward = FeedForward(hidden, config["ffn_hidden_size"], compute)

    def construct(self, x: Tensor) -> Tensor:
        x = x + self.attention(self.attention_norm(x))
        return x + self.feed_forward(self.ffn_norm(x))


class TinyDecoder(nn.Cell):
    """Tokens ``[batch, time]`` (int32) -> next-token logits ``[batch, time, vocab]``."""

    def __init__(self, config: dict[str, Any], dtypes: dict[str, ms.Type | None]) -> None:
        super().__init__()
        self.compute_dtype = dtypes["compute_dtype"]
        self.tok_embeddings = nn.Embedding(config["vocab_size"], config["hidden_size"])
        self.layers = nn.CellList([DecoderLayer(config, dtypes) for _ in range(config["num_layers"])])
        self.norm = RMSNorm(config["hidden_size"], config["rms_norm_eps"], dtypes["layernorm_compute_type"])
        self.lm_head = dense(config["hidden_size"], config["vocab_size"], self.compute_dtype)

    def construct(self, tokens: Tensor) -> Tensor:
        h = cast_to(self.tok_embeddings(tokens), self.compute_dtype)
        for layer in self.layers:
            h = layer(h)
        return self.lm_head(self.norm(h))


class NextTokenLoss(nn.Cell):
    """Mean cross-entropy of every position's logits against the next token, in float32."""

    def __init__(self) -> None:
        super().__init__()
        self.cross_entropy = nn.CrossEntropyLoss()

    def construct(self, logits: Tensor, labels: Tensor) -> Tensor:
        vocab = logits.shape[-1]
        return self.cross_entropy(ops.cast(logits, ms.float32).reshape(-1, vocab), labels.reshape(-1))


def successor_table(seed: int, vocab_size: int) -> np.ndarray:
    """The chain: each token's two possible successors."""
    return np.random.default_rng([_TABLE, seed]).integers(0, vocab_size, (vocab_size, 2))


def batch_at(
    seed: int, step: int, table: np.ndarray, batch_size: int, seq_length: int
) -> tuple[np.ndarray, np.ndarray]:
    """The batch of global step ``step``: ``(tokens, next tokens)``, from its own generator."""
    rng = np.random.default_rng([_BATCH, seed, step])
    stream = np.empty((batch_size, seq_length + 1), np.int32)
    stream[:, 0] = rng.integers(0, len(table), batch_size)
    picks = rng.integers(0, 2, (batch_size, seq_length))
    for i in range(seq_length):
        stream[:, i + 1] = table[stream[:, i], picks[:, i]]
    return stream[:, :-1].copy(), stream[:, 1:].copy()


def batches(
    seed: int, batch_size: int, seq_length: int, vocab_size: int, start_step: int = 0
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic token stream, from global step ``start_step`` on."""
    table = successor_table(seed, vocab_size)
    step = start_step
    while True:
        yield batch_at(seed, step, table, batch_size, seq_length)
        step += 1


def make(
    seed: int,
    compute_dtype: str | None = None,
    layernorm_compute_type: str | None = None,
    softmax_compute_type: str | None = None,
    rotary_dtype: str | None = None,
    vocab_size: int = 64,
    hidden_size: int = 64,
    num_heads: int = 4,
    num_layers: int = 2,
    ffn_hidden_size: int = 128,
    seq_length: int = 32,
    batch_size: int = 8,
    rope_theta: float = 10000.0,
    rms_norm_eps: float = 1e-6,
    learning_rate: float = 1e-3,
    start_step: int = 0,
) -> Workload:
    """The workload factory (see the module docstring for the fields, what fails and why)."""
    given = {
        "compute_dtype": compute_dtype,
        "layernorm_compute_type": layernorm_compute_type,
        "softmax_compute_type": softmax_compute_type,
        "rotary_dtype": rotary_dtype,
    }
    dtypes = {name: parse_dtype(name, value) for name, value in given.items()}
    config = {
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "num_heads": num_heads,
        "num_layers": num_layers,
        "ffn_hidden_size": ffn_hidden_size,
        "seq_length": seq_length,
        "rope_theta": rope_theta,
        "rms_norm_eps": rms_norm_eps,
    }
    return Workload(
        network=TinyDecoder(config, dtypes),
        loss_fn=NextTokenLoss(),
        optimizer=lambda params: nn.Adam(params, learning_rate=learning_rate),
        batches=batches(seed, batch_size, seq_length, vocab_size, start_step),
        target_loss=1.0,
    )
