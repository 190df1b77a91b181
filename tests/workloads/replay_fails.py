"""The built-in ``seed_repro`` (it compiles on every supported MindSpore), whose factory raises on rank 1
of a gang when it is built again for the same ``token``: the trial builds it once, its localization replay
builds it again, so the replay fails on rank 1 alone while rank 0's replay goes on. The count lives in the
process's environment, which outlives the module (a workload file is loaded afresh for each trial)."""

from __future__ import annotations

import os
from typing import Any

from ampsweep.jobs import Workload
from ampsweep.jobs.workloads.seed_repro import make as seed_repro


def make(seed: int, token: str = "", **kwargs: Any) -> Workload:
    from mindspore.communication import GlobalComm, get_rank

    key = f"REPLAY_FAILS_BUILDS_{token}"
    builds = int(os.environ.get(key, "0")) + 1
    os.environ[key] = str(builds)
    if builds > 1 and GlobalComm.INITED and get_rank() == 1:
        raise RuntimeError("rank 1 cannot rebuild its workload for the replay")
    return seed_repro(seed, **kwargs)
