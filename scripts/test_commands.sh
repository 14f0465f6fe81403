#!/usr/bin/env bash
# The console commands of `pip install '.[submit]'` (trainer-submit, trainer-deploy,
# trainer-predict), from an environment with that extra alone (.venv-commands, created on
# first use; no TensorFlow): each one's --help, and a submit --dry_run whose job JSON is
# checked. The package is reinstalled, not edited in place, on every run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
venv="$root/.venv-commands"
source "$root/scripts/make_venv.sh"
make_venv "$venv" "the submit extra" "google-cloud-storage>=2.10" \
  "google-cloud-aiplatform>=1.38" "pyyaml>=6" "absl-py>=1.0" "setuptools"
"$venv/bin/python" -m pip install --quiet --no-deps --force-reinstall "$root"
cd "$root"  # the checkout whose sdist submit stages
for command in trainer-submit trainer-deploy trainer-predict trainer-pipeline; do
  "$venv/bin/$command" --help > /dev/null
  echo "$command --help: ok"
done
# Without the `pipelines` extra, trainer-pipeline says what to install, in one line.
set +e
missing=$("$venv/bin/trainer-pipeline" --project=p --job_dir=gs://b/j --input=x --label=y \
  --task=binary --compile=/dev/null 2>&1)
code=$?
set -e
[ "$code" = 2 ] && [ "$missing" = "error: kfp is missing: pip install '.[pipelines]'" ] \
  || { echo "trainer-pipeline without kfp: exit $code, $missing" >&2; exit 1; }
echo "trainer-pipeline without the pipelines extra: one line, exit 2"
job=$("$venv/bin/trainer-submit" --project=p --region=us-central1 \
  --staging_dir=gs://b/staging --job_dir=gs://b/jobs/run-1 --dry_run -- \
  --train_data='gs://b/data/train-*' --label=y --task=binary)
"$venv/bin/python" - "$job" <<'PY'
import sys
from google.cloud import aiplatform_v1

job = aiplatform_v1.CustomJob.from_json(sys.argv[1])
spec = job.job_spec.worker_pool_specs[0]
assert spec.container_spec.args[-1] == "--task=binary", spec.container_spec.args
print("trainer-submit --dry_run: a CustomJob of", len(job.job_spec.worker_pool_specs),
      "pool(s), image", spec.container_spec.image_uri)
PY
