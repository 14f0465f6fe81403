"""trainer.base.cli: log lines as Cloud Logging reads them on Vertex AI, errors as one line."""

from __future__ import annotations

import json

from conftest import run_task, task_args

SEVERITIES = {
    "DEFAULT",
    "DEBUG",
    "INFO",
    "NOTICE",
    "WARNING",
    "ERROR",
    "CRITICAL",
    "ALERT",
    "EMERGENCY",
}


def json_lines(stdout: str) -> list[dict]:
    lines = [json.loads(line) for line in stdout.splitlines()]  # every line is JSON
    for entry in lines:
        assert entry["severity"] in SEVERITIES and isinstance(entry["message"], str), entry
    return lines


def test_a_vertex_job_logs_json_lines_on_stdout_and_nothing_on_stderr(fake_gcs, job_uri):
    proc = run_task(task_args(fake_gcs, job_uri, eval_every_steps=10), CLOUD_ML_JOB_ID="1234")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert proc.stderr == ""  # no TensorFlow start-up lines, no absl lines
    messages = [e["message"] for e in json_lines(proc.stdout)]
    assert any(m.startswith("step 20/20 loss=") for m in messages)
    assert any(m.startswith("final metrics:") for m in messages)


def test_a_vertex_job_error_is_one_json_line_of_severity_error(fake_gcs, job_uri):
    args = task_args(fake_gcs, job_uri, train_data="gs://test-bucket/nothing-*")
    proc = run_task(args, CLOUD_ML_JOB_ID="1234")
    assert proc.returncode == 2 and proc.stderr == ""
    errors = [e for e in json_lines(proc.stdout) if e["severity"] == "ERROR"]
    assert [e["message"] for e in errors] == [
        "error: no file matches 'gs://test-bucket/nothing-*' in bucket 'test-bucket'"
    ]


def test_a_bad_flag_on_vertex_is_a_json_error_line():
    proc = run_task(["--label=y", "--task=cluster"], CLOUD_ML_JOB_ID="1234")
    assert proc.returncode == 2 and proc.stderr == ""
    (entry,) = json_lines(proc.stdout)
    assert entry["severity"] == "ERROR" and "--task" in entry["message"]


def test_log_format_text_keeps_lines_on_stderr_even_on_vertex(fake_gcs, job_uri):
    proc = run_task(task_args(fake_gcs, job_uri, log_format="text"), CLOUD_ML_JOB_ID="1")
    assert proc.returncode == 0 and proc.stdout == ""
    assert "final metrics:" in proc.stderr
