"""A model of realistic shape: a mindcv image classifier (resnet18 by default) on synthetic images.

For measuring ampsweep's cost on a real network, not a float16 failure: docs/workloads.md
(``mindcv``). Needs the ``models`` extra (``mindcv==0.3.0``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import numpy as np

from ampsweep.jobs import Workload


def _class_means(rng: np.random.Generator, num_classes: int, image: int) -> np.ndarray:
    """One smooth mean image per class, so the classes are learnable from the pixels."""
    grid = np.linspace(0.0, 2.0 * np.pi, image, dtype=np.float32)
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    means = np.empty((num_classes, 3, image, image), np.float32)
    for c in range(num_classes):
        fx, fy, phase = rng.uniform(0.5, 3.0), rng.uniform(0.5, 3.0), rng.uniform(0.0, 2.0 * np.pi)
        for channel in range(3):
            means[c, channel] = np.sin(fx * xx + fy * yy + phase + channel)
    return means


def batches(
    seed: int, batch: int, image: int, num_classes: int, noise: float = 0.5
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Endless deterministic stream of ``(images NCHW float32, labels int32)``."""
    rng = np.random.default_rng(seed)
    means = _class_means(rng, num_classes, image)
    while True:
        labels = rng.integers(0, num_classes, batch)
        images = means[labels] + noise * rng.normal(0.0, 1.0, (batch, 3, image, image)).astype(np.float32)
        yield images.astype(np.float32), labels.astype(np.int32)


def make(
    seed: int,
    model: str = "resnet18",
    batch: int = 8,
    image: int = 32,
    num_classes: int = 10,
    learning_rate: float = 0.01,
    momentum: float = 0.9,
    model_args: dict[str, Any] | None = None,
) -> Workload:
    """The factory a spec names as ``ampsweep.jobs.workloads.mindcv:make``.

    ``model`` is a mindcv model name (``create_model``'s, at its registered
    size) or ``module.Class`` of ``mindcv.models`` built with ``model_args``:
    ``vit.VisionTransformer`` with ``image_size: 32, patch_size: 8,
    embed_dim: 32, depth: 2, num_heads: 2`` is mindcv's ViT at a size a CPU
    trains in seconds (the registered ViTs are fixed at 224 or 384 pixels).
    """
    try:
        from mindcv.models import create_model
    except ImportError as exc:  # the optional extra is missing
        raise ImportError(
            "ampsweep.jobs.workloads.mindcv needs mindcv: pip install -e '.[models]' (mindcv==0.3.0)"
        ) from exc
    from mindspore import nn

    if "." in model:  # a class of mindcv.models at a size of one's own, e.g. vit.VisionTransformer
        module, name = model.rsplit(".", 1)
        try:
            architecture = getattr(importlib.import_module(f"mindcv.models.{module}"), name)
        except (ImportError, AttributeError):
            raise ValueError(f"model: mindcv.models.{module} has no class {name!r}") from None
        network = architecture(num_classes=num_classes, in_channels=3, **(model_args or {}))
    else:
        network = create_model(
            model, pretrained=False, num_classes=num_classes, in_channels=3, **(model_args or {})
        )
    return Workload(
        network=network,
        loss_fn=nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
        optimizer=lambda params: nn.Momentum(params, learning_rate=learning_rate, momentum=momentum),
        batches=batches(seed, batch, image, num_classes),
    )
