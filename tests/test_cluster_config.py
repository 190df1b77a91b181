"""cluster.yaml and examples/cluster-gpu.yaml pass Ray's own cluster-config validation."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).parent.parent


def _validate(config: dict) -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    # what `ray up` does before it contacts any machine: fill defaults, then check the schema
    validate_config(prepare_config(copy.deepcopy(config)))


@pytest.mark.parametrize("path", ["cluster.yaml", "examples/cluster-gpu.yaml"])
def test_cluster_files_validate(path):
    config = yaml.safe_load((ROOT / path).read_text())
    _validate(config)
    commands = " ".join(config["setup_commands"])
    assert "pip install" in commands and "ampsweep" in commands


def test_ascend_cluster_declares_npus_on_every_node():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        assert any('"NPU": 8' in command for command in config[key]), key


def test_validation_really_rejects_a_broken_file():
    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    config["max_workers"] = "lots"
    with pytest.raises(Exception):  # noqa: B017 - Ray raises jsonschema's or click's error
        _validate(config)
