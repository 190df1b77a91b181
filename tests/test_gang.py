"""A trial on a gang of 2 rank actors trains what the same trial on one device trains.

One gang (a placement group with MindSpore's scheduler and 2 pinned CPU ranks)
is formed for the whole module and reused by every test, as the pool reuses
it across trials: forming one costs tens of seconds on 2 cores.

The single-device side runs in this process on the same machine, in the same
test: the two trajectories differ only by how the sum over the global batch
is split (two halves averaged across ranks against one mean), so in float32
they agree to rounding (1e-7 relative over 20 steps of tiny_mlp on the 2-core
VM), well inside the 1e-5 the float32 comparison allows over its 10 steps
(float16 parameters round to float16's spacing: see their test). Gradients
summed across the ranks instead of averaged are twice as large: the first
step's gradient norm is 2x one device's, and the losses part by 0.7 % from the
second step (3 % with float16 parameters), so every comparison below fails.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ampsweep.contracts import FP32_LEVEL
from ampsweep.jobs import TrialConfig, TrialResult
from ampsweep.jobs.training._trainer import run_trial
from tests._trial import trial_config
from tests.conftest import answer as _answer

TINY = Path(__file__).parent / "workloads" / "tiny_mlp.py"
STEPS = 10


def _fp32_trial(**overrides: Any) -> TrialConfig:
    values: dict[str, Any] = dict(
        workload=f"{TINY}:make",
        steps=STEPS,
        amp_level=FP32_LEVEL,
        dtype="float32",
        clip=1.0,
        localize=False,
    )
    return trial_config(**{**values, **overrides})


@pytest.mark.slow
def test_two_devices_follow_one_device_at_the_same_global_batch(gang):
    actors, formed = gang
    single = _fp32_trial()
    on_two = dataclasses.replace(single, devices=2)
    one = run_trial(single, single.workload)
    two = _answer(actors, actors.run(formed, on_two, on_two.workload, None, None))

    assert one.outcome == "completed", one.error
    assert two.outcome == "completed", two.error
    loss_one = one.steps.column("loss").to_numpy()
    loss_two = two.steps.column("loss").to_numpy()
    assert len(loss_one) == len(loss_two) == STEPS
    np.testing.assert_allclose(loss_two, loss_one, rtol=1e-5)
    # the clip reads the averaged gradients' norm: the global batch's, as on one device
    norm_one = one.steps.column("grad_norm").to_numpy()
    norm_two = two.steps.column("grad_norm").to_numpy()
    np.testing.assert_allclose(norm_two, norm_one, rtol=1e-5)
    assert (norm_one > 1.0).any()  # the clip fired, so the comparison covers it
    # two halves averaged are not one mean bit for bit: each rank did train on its half
    assert not np.array_equal(loss_two, loss_one)
    # the loss went down: the ranks trained, not merely agreed
    assert loss_two[-1] < loss_two[0]


@pytest.mark.slow
def test_both_ranks_end_with_the_same_parameters(gang):
    actors, formed = gang
    config = dataclasses.replace(_fp32_trial(steps=10, seed=1), devices=2)
    answers = _answer_all(actors, formed, config)
    checksums = [answer.checksum for answer in answers]
    assert len(checksums) == 2 and checksums[0] and checksums[0] == checksums[1]
    assert sum(answer.result is not None for answer in answers) == 1  # the tables come from rank 0 alone


@pytest.mark.slow
def test_an_overflow_skips_the_step_on_every_rank(gang):
    """A loss scale far too large overflows float16 at first: both ranks skip the same steps
    (had one rank updated where the other skipped, their parameters would differ and the trial
    fail as RanksDiverged). The steps skipped need not be one device's: near the edge a half
    batch can overflow where the whole batch does not, as on the user's own N devices."""
    actors, formed = gang
    single = trial_config(
        workload=f"{TINY}:make", steps=30, amp_level="O2", loss_scale="dynamic:1e9", localize=False
    )
    on_two = dataclasses.replace(single, devices=2)
    one = run_trial(single, single.workload)
    two = _answer(actors, actors.run(formed, on_two, on_two.workload, None, None))
    assert two.outcome == "completed", two.error  # not RanksDiverged: every rank skipped alike
    skipped_one = one.steps.column("skipped").to_pylist()
    skipped_two = two.steps.column("skipped").to_pylist()
    assert skipped_one[0] and skipped_two[0], "the first scale overflowed on one device and on two"
    assert not all(skipped_two), "the scale recovered"


def _answer_all(actors: Any, formed: Any, config: TrialConfig) -> list[Any]:
    """Every rank's ``RankAnswer``, asked of the ranks directly."""
    import ray

    return ray.get([rank.run_rank.remote(config, config.workload, None, None) for rank in formed.ranks])


@pytest.mark.slow
def test_a_batch_the_devices_do_not_divide_fails_in_one_line(gang):
    actors, formed = gang
    config = trial_config(steps=5, workload_args={"batch_size": 5}, devices=2, localize=False)
    result = _answer(actors, actors.run(formed, config, config.workload, None, None))
    assert result.outcome == "failed"
    assert result.error.startswith("UnevenBatch: a global batch of 5 does not split evenly across 2 devices")
    assert "\n" not in result.error


def test_ranks_that_ended_apart_fail_the_trial_and_end_their_gang():
    from ampsweep.jobs import RankAnswer as A
    from ampsweep.sweep.cluster._gang import trial_answer

    result = run_trial(_fp32_trial(steps=2), str(TINY) + ":make")
    failed, apart = trial_answer([A(result, "aaaa"), A(None, "bbbb")])
    assert failed.outcome == "failed" and not apart
    assert failed.error.startswith("RanksDiverged: the ranks ended with different parameters")
    # rank 0 completed, rank 1's part raised (it hands its failure back): the trial failed, saying which
    # rank, and the gang ends: rank 0 ran collectives rank 1 never joined
    broken = TrialResult.failure(result.config, "RuntimeError: out of memory", result.placement)
    failed, apart = trial_answer([A(result, "aaaa"), A(broken, "")])
    assert failed.outcome == "failed" and failed.error == "rank 1 of 2 failed: RuntimeError: out of memory"
    assert apart
    # rank 0 never answered (it waits in a collective rank 1 left): the same
    stuck, apart = trial_answer([None, A(broken, "")])
    assert stuck.error == "rank 1 of 2 failed: RuntimeError: out of memory" and apart
    # every rank failed at the same step (a workload that cannot be built): they stay in step
    both = [A(broken, ""), A(replace(broken, placement=result.placement), "")]
    failed, apart = trial_answer(both)
    assert failed.error == "RuntimeError: out of memory" and not apart
    # rank 1 never answered while rank 0's collective gave up waiting at step 3: rank 1 stalled there
    waited = replace(broken, error="RuntimeError: Launch kernel failed: Default/AllReduce-op0", failed_step=3)
    stalled, apart = trial_answer([A(waited, ""), None])
    assert stalled.error.startswith("rank 1 of 2 stalled before step 3: rank 0 waited for it") and apart
    later = replace(broken, steps_run=broken.steps_run + 3)
    assert trial_answer([A(broken, ""), A(later, "")])[1], "ranks that failed at different steps are apart"


def test_a_rank_takes_its_part_of_the_global_batch():
    from ampsweep.jobs.training._data_parallel import RankGroup, UnevenBatch, shard

    x, y = np.arange(12).reshape(6, 2), np.arange(6)
    assert [part.tolist() for part in shard((x, y), RankGroup(rank=1, size=3))] == [[[4, 5], [6, 7]], [2, 3]]
    with pytest.raises(UnevenBatch, match="a global batch of 6 does not split evenly across 4 devices"):
        shard((x, y), RankGroup(rank=0, size=4))


def test_a_gang_needs_its_devices_on_one_node_under_strict_pack():
    from ampsweep.sweep._errors import SpecError
    from ampsweep.sweep.cluster._pool import gang_layout
    from ampsweep.sweep.devices import AscendBackend

    npu = AscendBackend()
    two_nodes = [{"NPU": 8.0, "CPU": 4.0}, {"NPU": 4.0, "CPU": 4.0}]
    assert gang_layout([(npu, 12)], two_nodes, 8, "STRICT_PACK")[0][1] == 1
    assert gang_layout([(npu, 12)], two_nodes, 4, "STRICT_PACK")[0][1] == 3
    three_each = [{"NPU": 3.0}, {"NPU": 3.0}]
    assert gang_layout([(npu, 6)], three_each, 4, "PACK")[0][1] == 1  # PACK spans nodes
    with pytest.raises(SpecError, match="no room for a gang of 4 ascend devices .the most on one node is 3"):
        gang_layout([(npu, 6)], three_each, 4, "STRICT_PACK")


def test_a_sweep_runs_every_trial_on_the_same_number_of_devices():
    from ampsweep.sweep import Sweep
    from ampsweep.sweep._errors import SpecError
    from ampsweep.sweep.cluster._launcher import gang_of

    raw = {"name": "g", "workload": f"{TINY}:make", "steps": 5, "grid": {"amp_level": ["O0"]}}
    on_two = Sweep({**raw, "devices_per_trial": 2, "placement_strategy": "PACK", "stall_timeout_s": 90})
    assert gang_of(on_two.plan()) == (2, "PACK", 90)
    assert gang_of(Sweep(raw).plan()) == (1, "STRICT_PACK", None)
    forked = Sweep({**raw, "devices_per_trial": 2, "start_from": {"steps": 3}})  # its prefix too, on a gang
    assert gang_of(forked.plan()) == (2, "STRICT_PACK", None)
    assert {p.devices for p in forked.plan().prefixes} == {2}
    mixed = forked.plan()
    mixed.trials[0] = replace(mixed.trials[0], devices=1)  # a plan that mixes sizes is refused
    with pytest.raises(SpecError, match="this plan mixes 1 and 2"):
        gang_of(mixed)


def test_a_global_batch_the_devices_do_not_divide_is_refused_before_anything_runs():
    from ampsweep.sweep import Sweep
    from ampsweep.sweep._errors import SpecError

    knob = Path(__file__).parent / "workloads" / "softmax_knob.py"  # a generator of batches of 16
    raw = {"name": "g", "workload": f"{knob}:make", "steps": 5, "grid": {"amp_level": ["O0"]}}
    with pytest.raises(
        SpecError,
        match="devices_per_trial: 3 is not allowed; a number that divides the workload's global batch of 16",
    ):
        Sweep({**raw, "devices_per_trial": 3})
    assert len(Sweep({**raw, "devices_per_trial": 4}).plan().trials) == 1


@pytest.mark.slow
def test_float16_gradients_are_averaged_in_float32_on_cpu_ranks(gang):
    """MindSpore's CPU AllReduce sums float32 only: a workload whose parameters are float16 trains on a gang
    of CPU ranks (its gradients averaged in float32, then cast back) as on one device.

    Not to 1e-5: each rank's float16 gradient of its half batch is rounded to float16 before the average,
    one device's of the whole batch once, so the parameters (float16) part by an ulp here and there, and
    the logits with them: on the 2-core VM the losses and norms part by up to 1.5e-4 in 10 steps (two
    seeds), inside float16's spacing of 2^-10 (1e-3) the test allows. Summed gradients miss it by far:
    the first step's norm doubles, the second step's loss is 3 % off."""
    half = f"{Path(__file__).parent / 'workloads' / 'half_params.py'}:make"
    single = _fp32_trial(workload=half, steps=STEPS, clip=None)
    one = run_trial(single, single.workload)
    on_two = replace(single, devices=2)
    two = _answer(gang[0], gang[0].run(gang[1], on_two, on_two.workload, None, None))
    assert two.outcome == one.outcome == "completed", two.error
    for column in ("loss", "grad_norm"):
        alone, together = one.steps.column(column).to_numpy(), two.steps.column(column).to_numpy()
        assert len(alone) == len(together) == STEPS
        np.testing.assert_allclose(together, alone, rtol=1e-3, err_msg=column)
