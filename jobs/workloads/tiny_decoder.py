"""A Llama-style decoder whose precision is set by mindformers' own config fields; O2 breaks it in RMSNorm.

The backward of the first RMSNorm's ``rsqrt`` overflows float16 on an embedding
initialised as MindSpore and mindformers do; ``layernorm_compute_type: float32`` fixes
it. The fields, the measurements and why: docs/mindformers.md (The built-in example).
``RMSNorm`` is our own: ``ops.rms_norm`` has no CPU kernel (FACTS).
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
    table = np.random.default_rng([_TABLE, seed]).integers(0, vocab_size, (vocab_size, 2))  # the chain
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
    """The workload factory (docs/mindformers.md says what the fields mean, what fails and why)."""
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
