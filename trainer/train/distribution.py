"""Which `tf.distribute` strategy a job runs under, decided once from its environment.

The cluster comes from `TF_CONFIG`, or from Vertex's `CLUSTER_SPEC` when only that is set
(custom containers): worker pool 0 is the chief, 1 the workers, 2 parameter servers (or
Reduction Server, which runs Google's image, never this code), 3 evaluators.

`create_strategy` must run before any other TensorFlow op: collective ops and logical
devices can only be configured before the runtime starts.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from collections.abc import Mapping

import tensorflow as tf

POOL_ROLES = {
    "workerpool0": "chief",
    "workerpool1": "worker",
    "workerpool2": "ps",
    "workerpool3": "evaluator",
    "master": "chief",
}
TRAINING_ROLES = ("chief", "worker")


class ClusterError(ValueError):
    """A malformed or unsupported cluster description; the message names the variable."""


class PeerLost(RuntimeError):
    """Another task of the cluster died or stopped answering; the message names it."""


# How TensorFlow names a task in collective errors, e.g. /job:worker/replica:0/task:1.
_TASK = re.compile(r"/job:(\w+)(?:/replica:\d+)?/task:(\d+)")
_LOST = (
    "unhealthy",
    "heartbeat",
    "Connection reset",
    "Socket closed",
    "Connection refused",
    "failed to connect",
    "UNAVAILABLE",
    "unavailable",
)


@dataclasses.dataclass(frozen=True)
class Cluster:
    """The job's tasks by role, and which one this process is."""

    tasks: dict[str, list[str]]
    task_type: str
    task_index: int
    source: str  # the environment variable it came from

    @property
    def training_tasks(self) -> list[tuple[str, int]]:
        return [(role, i) for role in TRAINING_ROLES for i in range(len(self.tasks.get(role, [])))]

    @property
    def is_chief(self) -> bool:
        """The chief, or worker 0 in a cluster that names no chief."""
        if "chief" in self.tasks:
            return self.task_type == "chief"
        return self.task_type == "worker" and self.task_index == 0


@dataclasses.dataclass(frozen=True)
class Decision:
    """A chosen strategy kind, with the reason to log."""

    kind: str  # default, one_device, mirrored, multi_worker
    reason: str
    devices: tuple[str, ...] = ()


def read_cluster(env: Mapping[str, str]) -> Cluster | None:
    """Parses TF_CONFIG, else CLUSTER_SPEC; None when neither describes a cluster.

    Raises:
      ClusterError: for bad JSON, a missing task, an unknown role or an index out of range.
    """
    for name in ("TF_CONFIG", "CLUSTER_SPEC"):
        text = env.get(name, "").strip()
        if not text:
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise ClusterError(f"{name} is not valid JSON: {e}") from None
        if not isinstance(obj, dict):
            raise ClusterError(f"{name} must be a JSON object with 'cluster' and 'task'")
        raw = obj.get("cluster") or {}
        if not raw:
            continue  # Vertex sets TF_CONFIG without a cluster for single-replica jobs.
        if not isinstance(raw, dict):
            raise ClusterError(f"{name}: 'cluster' must map roles to address lists")
        tasks: dict[str, list[str]] = {}
        for role, addresses in raw.items():
            if not isinstance(addresses, list):
                raise ClusterError(f"{name}: cluster[{role!r}] must be a list of host:port")
            tasks.setdefault(POOL_ROLES.get(role) or role, []).extend(addresses)
        task = obj.get("task")
        if not isinstance(task, dict) or "type" not in task:
            raise ClusterError(f"{name} has no 'task' with a 'type' and 'index'")
        task_type = POOL_ROLES.get(task["type"], task["type"])
        index = task.get("index", 0)
        if task_type not in tasks:
            raise ClusterError(
                f"{name}: task type {task['type']!r} is not in the cluster "
                f"(roles: {', '.join(raw)})"
            )
        if not isinstance(index, int) or not 0 <= index < len(tasks[task_type]):
            raise ClusterError(
                f"{name}: task index {index!r} is out of range for "
                f"{task['type']!r}, which has {len(tasks[task_type])} tasks"
            )
        return Cluster(tasks=tasks, task_type=task_type, task_index=index, source=name)
    return None


def decide(
    requested: str, cluster: Cluster | None, num_gpus: int, cpu_devices: int = 1
) -> Decision:
    """Chooses the strategy kind. Pure: tests feed it fake clusters and device counts.

    Args:
      requested: --strategy (auto, default, one_device, mirrored, multi_worker).
      cluster: from `read_cluster`.
      num_gpus: GPUs this process sees.
      cpu_devices: logical CPU devices to split the CPU into when there is no GPU.

    Raises:
      ClusterError: if this task cannot train (evaluator, parameter server) or an explicit
        choice cannot work in this cluster.
    """
    workers = len(cluster.training_tasks) if cluster else 1
    if cluster:
        if cluster.task_type == "evaluator":
            raise ClusterError(
                f"{cluster.source}: this task is an evaluator (worker pool 3); separate "
                "evaluator tasks are not supported, the chief evaluates: remove that pool"
            )
        if cluster.task_type == "ps":
            raise ClusterError(
                f"{cluster.source}: this task is a parameter server (worker pool 2); "
                "parameter-server training is not supported, use chief + workers"
            )
        where = (
            f"{cluster.source} names {workers} training task(s), this is "
            f"{cluster.task_type} {cluster.task_index}"
        )
    else:
        where = "no cluster in TF_CONFIG or CLUSTER_SPEC"
    gpus = tuple(f"/gpu:{i}" for i in range(num_gpus))
    cpus = tuple(f"/cpu:{i}" for i in range(cpu_devices))
    local = f"{num_gpus} GPU(s)" + ("" if num_gpus else f", {cpu_devices} CPU device(s)")

    if requested in ("default", "one_device", "mirrored") and workers > 1:
        raise ClusterError(
            f"--strategy={requested} runs in one process, but {where}; "
            "use --strategy=multi_worker or auto"
        )
    if requested == "multi_worker" or (requested == "auto" and workers > 1):
        return Decision("multi_worker", f"{requested}: {where}; {local} per worker")
    if requested == "mirrored" or (requested == "auto" and (num_gpus > 1 or cpu_devices > 1)):
        devices = gpus or cpus
        return Decision("mirrored", f"{requested}: {where}; mirrored over {local}", devices)
    if requested == "one_device" or (requested == "auto" and num_gpus == 1):
        device = gpus[0] if gpus else "/cpu:0"
        return Decision("one_device", f"{requested}: {where}; {local}, on {device}", (device,))
    return Decision("default", f"{requested}: {where}; {local}")


PUBLIC_NAMES = {
    "multi_worker": "MultiWorkerMirroredStrategy",
    "mirrored": "MirroredStrategy",
    "one_device": "OneDeviceStrategy",
    "default": "default",
}


def create_strategy(
    requested: str, env: Mapping[str, str], cpu_devices: int = 1
) -> tuple[tf.distribute.Strategy, Cluster | None]:
    """Decides and creates the strategy. Call once, before any other TensorFlow op.

    Returns:
      The strategy and the cluster (None for a single process).
    """
    cluster = read_cluster(env)
    # Listing physical devices does not start the runtime; anything that runs an op would.
    num_gpus = len(tf.config.list_physical_devices("GPU"))
    if cpu_devices > 1 and not num_gpus:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * cpu_devices
        )
    decision = decide(requested, cluster, num_gpus, cpu_devices)
    if decision.kind == "multi_worker":
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            cluster_resolver=_resolver(cluster, num_gpus) if cluster else None
        )
    elif decision.kind == "mirrored":
        strategy = tf.distribute.MirroredStrategy(list(decision.devices))
    elif decision.kind == "one_device":
        strategy = tf.distribute.OneDeviceStrategy(decision.devices[0])
    else:
        strategy = tf.distribute.get_strategy()
    # The public API's names: MultiWorkerMirroredStrategy is implemented by a class named
    # CollectiveAllReduceStrategy, the default strategy by _DefaultDistributionStrategy.
    logging.info(
        "strategy %s with %d replica(s) in sync (%s)",
        PUBLIC_NAMES[decision.kind],
        strategy.num_replicas_in_sync,
        decision.reason,
    )
    return strategy, cluster


def _resolver(cluster: Cluster, num_gpus: int) -> tf.distribute.cluster_resolver.ClusterResolver:
    # Only chief and workers take part in collectives; Reduction Server tasks (pool 2)
    # are reached by NCCL's plugin, not by TensorFlow.
    spec = {role: cluster.tasks[role] for role in TRAINING_ROLES if cluster.tasks.get(role)}
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(spec),
        task_type=cluster.task_type,
        task_id=cluster.task_index,
        rpc_layer="grpc",
        num_accelerators={"GPU": num_gpus} if num_gpus else None,
    )


def lost_peer(error: Exception, cluster: Cluster) -> str | None:
    """Describes the peer named by a collective error, or None if it is another error.

    A killed task resets its connections, and its peers fail within a second; a hung or
    unreachable one stops sending heartbeats, and the coordination service reports it
    after its heartbeat timeout (about 10 s).
    """
    text = str(error)
    if not any(marker in text for marker in _LOST):
        return None
    me = (cluster.task_type, cluster.task_index)
    for role, index in _TASK.findall(text):
        peer = (POOL_ROLES.get(role, role), int(index))
        if peer != me and peer[1] < len(cluster.tasks.get(peer[0], [])):
            address = cluster.tasks[peer[0]][peer[1]]
            reason = "stopped sending heartbeats" if "heartbeat" in text else "connection lost"
            return f"lost {peer[0]} {peer[1]} ({address}): {reason}"
    return "lost contact with another task of the cluster"


def is_chief(cluster: Cluster | None) -> bool:
    """Whether this process writes the job's outputs (always, outside a cluster)."""
    return cluster is None or cluster.is_chief
