"""The strategy decision, from Vertex-shaped TF_CONFIG / CLUSTER_SPEC and device counts."""

import json

import pytest

from trainer.train import distribution as d

VERTEX_TF_CONFIG = {  # what Vertex sets on worker 1 of a chief + 2 workers job
    "cluster": {
        "chief": ["cmle-training-workerpool0-ab-0:2222"],
        "worker": ["cmle-training-workerpool1-ab-0:2222", "cmle-training-workerpool1-ab-1:2222"],
    },
    "task": {"type": "worker", "index": 1, "trial": ""},
    "environment": "cloud",
    "job": {},
}
VERTEX_CLUSTER_SPEC = {
    "cluster": {
        "workerpool0": ["wp0-0:2222"],
        "workerpool1": ["wp1-0:2222", "wp1-1:2222"],
        "workerpool2": ["wp2-0:2222"],
    },
    "environment": "cloud",
    "task": {"type": "workerpool0", "index": 0},
}


def env(name, obj):
    return {name: json.dumps(obj)}


def test_reads_vertex_tf_config():
    cluster = d.read_cluster(env("TF_CONFIG", VERTEX_TF_CONFIG))
    assert (cluster.task_type, cluster.task_index, cluster.source) == ("worker", 1, "TF_CONFIG")
    assert cluster.training_tasks == [("chief", 0), ("worker", 0), ("worker", 1)]
    assert not cluster.is_chief


def test_reads_cluster_spec_pools_when_tf_config_is_absent():
    cluster = d.read_cluster(env("CLUSTER_SPEC", VERTEX_CLUSTER_SPEC))
    assert (cluster.task_type, cluster.task_index, cluster.is_chief) == ("chief", 0, True)
    assert cluster.tasks["ps"] == ["wp2-0:2222"]
    assert len(cluster.training_tasks) == 3  # pool 2 does not train


def test_tf_config_wins_and_master_means_chief():
    both = {
        **env(
            "TF_CONFIG",
            {
                "cluster": {"master": ["m:1"], "worker": ["w:1"]},
                "task": {"type": "master", "index": 0},
            },
        ),
        **env("CLUSTER_SPEC", VERTEX_CLUSTER_SPEC),
    }
    cluster = d.read_cluster(both)
    assert cluster.source == "TF_CONFIG" and cluster.is_chief
    assert cluster.tasks == {"chief": ["m:1"], "worker": ["w:1"]}


def test_no_cluster_or_single_replica_vertex_job():
    assert d.read_cluster({}) is None
    # Vertex sets a TF_CONFIG without a cluster on single-replica jobs.
    assert d.read_cluster(env("TF_CONFIG", {"cluster": {}, "task": {}})) is None


def test_worker_zero_is_chief_without_a_chief():
    cluster = d.read_cluster(
        env(
            "TF_CONFIG",
            {"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}},
        )
    )
    assert cluster.is_chief


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("{not json", "TF_CONFIG is not valid JSON"),
        ('["a"]', "TF_CONFIG must be a JSON object"),
        ('{"cluster": {"worker": ["a:1"]}}', "TF_CONFIG has no 'task'"),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}',
            "TF_CONFIG: task index 3 is out of range for 'worker', which has 1 tasks",
        ),
        (
            '{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
            "TF_CONFIG: task type 'chief' is not in the cluster",
        ),
        (
            '{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}',
            "cluster['worker'] must be a list",
        ),
    ],
)
def test_malformed_cluster_is_named(value, fragment):
    with pytest.raises(d.ClusterError) as e:
        d.read_cluster({"TF_CONFIG": value})
    assert fragment in str(e.value)


def cluster(n_workers, task_type="chief", index=0):
    tasks = {"chief": ["c:1"], "worker": [f"w{i}:1" for i in range(n_workers)]}
    return d.Cluster(tasks=tasks, task_type=task_type, task_index=index, source="TF_CONFIG")


@pytest.mark.parametrize(
    "requested, clus, gpus, cpus, kind, devices",
    [
        ("auto", cluster(2), 0, 1, "multi_worker", ()),
        ("auto", cluster(0), 4, 1, "mirrored", ("/gpu:0", "/gpu:1", "/gpu:2", "/gpu:3")),
        ("auto", None, 2, 1, "mirrored", ("/gpu:0", "/gpu:1")),
        ("auto", None, 1, 1, "one_device", ("/gpu:0",)),
        ("auto", None, 0, 1, "default", ()),
        ("auto", None, 0, 2, "mirrored", ("/cpu:0", "/cpu:1")),
        ("mirrored", None, 0, 1, "mirrored", ("/cpu:0",)),
        ("one_device", None, 0, 1, "one_device", ("/cpu:0",)),
        ("default", None, 2, 1, "default", ()),
        ("multi_worker", None, 0, 1, "multi_worker", ()),
    ],
)
def test_decision_table(requested, clus, gpus, cpus, kind, devices):
    decision = d.decide(requested, clus, gpus, cpus)
    assert (decision.kind, decision.devices) == (kind, devices)
    assert requested in decision.reason


def test_decision_reason_states_the_cluster():
    reason = d.decide("auto", cluster(2, "worker", 1), 0).reason
    assert "TF_CONFIG names 3 training task(s), this is worker 1" in reason


@pytest.mark.parametrize("requested", ["mirrored", "one_device", "default"])
def test_single_process_strategy_in_a_cluster_is_an_error(requested):
    with pytest.raises(
        d.ClusterError,
        match=f"--strategy={requested} runs in one process, but TF_CONFIG names 3 training task",
    ):
        d.decide(requested, cluster(2), 0)


@pytest.mark.parametrize(
    "task_type, fragment",
    [
        ("evaluator", "separate evaluator tasks are not supported"),
        ("ps", "parameter-server training is not supported"),
    ],
)
def test_evaluator_and_parameter_server_tasks_exit_clearly(task_type, fragment):
    clus = d.Cluster(
        tasks={"chief": ["c:1"], task_type: ["x:1"]},
        task_type=task_type,
        task_index=0,
        source="CLUSTER_SPEC",
    )
    with pytest.raises(d.ClusterError, match=fragment):
        d.decide("auto", clus, 0)
