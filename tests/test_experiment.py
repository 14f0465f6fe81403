"""Vertex AI Experiments from inside the job: the run the environment names gets the
plan and the final metrics, through the SDK (a stand-in at the boundary with Google)."""

from __future__ import annotations

import json
import pathlib
import textwrap

import pytest

from trainer.train import experiment

from conftest import REPO, run_task, task_args

CONTEXTS = "projects/proj/locations/europe-west4/metadataStores/default/contexts"


class FakeSdk:
    """google.cloud.aiplatform's calls the job makes, recorded."""

    def __init__(self, existing: bool = True, fail_at: str | None = None):
        self.calls: list[tuple] = []
        self.existing, self.fail_at = existing, fail_at

    def _record(self, name, *args, **kwargs):
        if name == self.fail_at:
            raise RuntimeError("503 Service Unavailable\nretry later")
        self.calls.append((name, args, kwargs))

    def init(self, **kwargs):
        self._record("init", **kwargs)

    def start_run(self, run, resume=False):
        if resume and not self.existing:
            raise RuntimeError(f"run {run} not found")
        self._record("start_run", run, resume=resume)

    def log_params(self, params):
        self._record("log_params", params)

    def log_metrics(self, metrics):
        self._record("log_metrics", metrics)

    def end_run(self):
        self._record("end_run")


@pytest.mark.parametrize(
    "env, found",
    [
        ({}, None),
        ({experiment.EXPERIMENT_ENV: "churn"}, None),  # no run: nothing to log to
        ({experiment.EXPERIMENT_ENV: "churn", experiment.RUN_ENV: "r1"}, ("churn", "r1", {})),
        (
            {
                experiment.EXPERIMENT_ENV: f"{CONTEXTS}/churn",
                experiment.RUN_ENV: f"{CONTEXTS}/churn-r1",
            },
            ("churn", "r1", {"project": "proj", "location": "europe-west4"}),
        ),
    ],
)
def test_the_run_named_by_the_environment(env, found):
    assert experiment.target(env) == found


def test_nested_metrics_flatten_to_numbers_and_strings():
    flat = experiment.flatten(
        {"decided": {"batch_size": 64, "hidden_units": [16, 8], "cache": None}, "ok": True}
    )
    assert flat == {"decided.batch_size": 64, "decided.hidden_units": "[16, 8]", "ok": "true"}


ENV = {experiment.EXPERIMENT_ENV: f"{CONTEXTS}/churn", experiment.RUN_ENV: f"{CONTEXTS}/churn-r1"}
PLAN = {"decided": {"batch_size": 64, "learning_rate": 0.001}, "replicas": 1}
METRICS = {"validation": {"auRoc": 0.91, "examples": 100}, "selection": {"metric": "logLoss"}}


@pytest.mark.parametrize("existing", [True, False])
def test_logs_the_plan_and_the_numbers_of_the_metrics(existing):
    sdk = FakeSdk(existing=existing)
    assert experiment.log(ENV, PLAN, METRICS, sdk)
    assert sdk.calls == [
        ("init", (), {"experiment": "churn", "project": "proj", "location": "europe-west4"}),
        # resumed when the submitter made it, made here otherwise
        ("start_run", ("r1",), {"resume": existing}),
        (
            "log_params",
            ({"decided.batch_size": 64, "decided.learning_rate": 0.001, "replicas": 1},),
            {},
        ),
        ("log_metrics", ({"validation.auRoc": 0.91, "validation.examples": 100},), {}),
        ("end_run", (), {}),
    ]


def test_a_failure_to_log_is_a_warning_never_a_failed_job(caplog):
    sdk = FakeSdk(fail_at="log_metrics")
    assert not experiment.log(ENV, PLAN, METRICS, sdk)
    assert (
        "could not log to Vertex AI Experiments run 'r1' of 'churn': 503 Service Unavailable"
        in (caplog.text)
    )
    assert not experiment.log({}, PLAN, METRICS, FakeSdk())  # no run named: nothing asked


def test_the_job_logs_its_plan_and_metrics_to_the_run(fake_gcs, job_uri, tmp_path):
    # The SDK stand-in, first on the path: it writes what it is asked to a file.
    fake = tmp_path / "sdk" / "google" / "cloud" / "aiplatform"
    fake.mkdir(parents=True)
    calls = tmp_path / "calls.json"
    (fake / "__init__.py").write_text(
        textwrap.dedent(
            f"""
            import json
            CALLS = []
            def _record(*call):
                CALLS.append(call)
                with open({str(calls)!r}, "w") as f:
                    json.dump(CALLS, f)
            def init(**kwargs): _record("init", kwargs)
            def start_run(run, resume=False): _record("start_run", run, resume)
            def log_params(params): _record("log_params", params)
            def log_metrics(metrics): _record("log_metrics", metrics)
            def end_run(): _record("end_run")
            """
        )
    )
    proc = run_task(task_args(fake_gcs, job_uri), PYTHONPATH=f"{tmp_path / 'sdk'}:{REPO}", **ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    recorded = json.loads(calls.read_text())
    assert [c[0] for c in recorded] == ["init", "start_run", "log_params", "log_metrics", "end_run"]
    params, metrics = recorded[2][1], recorded[3][1]
    assert params["decided.batch_size"] == 32 and params["decided.train_steps"] == 20
    written = json.loads((pathlib.Path(fake_gcs) / job_uri[5:] / "model/metrics.json").read_text())
    assert metrics["validation.logLoss"] == pytest.approx(written["validation"]["logLoss"])
    assert "logged" in proc.stderr and "Vertex AI Experiments run 'r1' of 'churn'" in proc.stderr
