"""A private local Ray head for one sweep, without the processes a sweep never uses.

``ray.init(address="local")`` starts, besides the GCS and the raylet (with its
dashboard and runtime-env agents, which it needs), three Python processes a
sweep never talks to: the autoscaler monitor, the log monitor (the driver is
told no worker output) and the dashboard's API server, which it starts even
with the dashboard off and then polls for its address before the raylet may
start. The raylet then prestarts an idle worker per CPU for the driver, and
the actors never use them: each asks for resources of its own and gets a new
process. On a 2-core machine all of that shares the cores with the start of
the sweep: ``ray.init`` took 4.3-5.7 s, and 1.6-2.7 s with them left out (4
alternating runs each).

``ray.init`` exposes no switch for them, so the head is started here the way
``ray start --head --no-monitor --include-log-monitor=False`` starts one, on
Ray's ``Node`` (a private API of the Ray this project pins), and without the
API server; ``ray.init`` then joins it. The head becomes the driver's own node,
as a head ``ray.init`` starts is, so ``ray.shutdown`` (ours, a user's after
``Sweep.run``, or the one at exit) ends it the same way. If this Ray's private
API differs, the plain ``ray.init`` runs instead.
"""

from __future__ import annotations

from typing import Any

#: no idle workers at start: the actors never take them (``prestart_worker_first_driver``)
SYSTEM_CONFIG = {"prestart_worker_first_driver": False}


def start_local_head(num_cpus: int, common: dict[str, Any]) -> None:
    """Start a lean head on this machine and connect this process to it (``common``: ``ray.init``'s
    other arguments); the plain local ``ray.init`` when the lean start is not possible."""
    import ray

    node = None
    try:
        node, ip = _lean_head(num_cpus)
        ray.init(address=node.address, _node_ip_address=ip, **common)
        from ray._private import worker

        worker._global_node = node  # so that ray.shutdown ends the head, as for ray.init's own
        return
    except Exception:  # noqa: BLE001 - a Ray whose private API moved: start the usual way
        if ray.is_initialized():
            ray.shutdown()
        if node is not None:
            node.kill_all_processes(check_alive=False, allow_graceful=True)
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        _system_config=SYSTEM_CONFIG,
        **common,
    )


def _lean_head(num_cpus: int) -> tuple[Any, str]:
    """The started head node, and this machine's address as Ray names it (the driver's too)."""
    from ray._private import services
    from ray._private.node import Node
    from ray._private.parameter import RayParams

    class _HeadWithoutApiServer(Node):
        def start_api_server(self, **_: Any) -> None:
            self._webui_url = None

    ip = services.resolve_ip_for_localhost("127.0.0.1")  # as ray.init resolves it for its own head
    params = RayParams(
        node_ip_address=ip,
        num_cpus=num_cpus,
        include_dashboard=False,
        no_monitor=True,
        include_log_monitor=False,
        _system_config=dict(SYSTEM_CONFIG),
    )
    node = _HeadWithoutApiServer(
        params, head=True, shutdown_at_exit=False, spawn_reaper=True, ray_init_cluster=True
    )
    return node, ip
