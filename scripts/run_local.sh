#!/usr/bin/env bash
# The main job, locally: writes sample data to a fake Cloud Storage root, trains with the
# same gs:// command line a Vertex AI job gets, and prints predictions from the exported
# model. Extra arguments go to trainer.task, e.g. scripts/run_local.sh --cpu_devices=2
source "$(dirname "$0")/env.sh"
fake_gcs=.local/gcs
job_dir="gs://sample-bucket/jobs/local-$(date +%Y%m%d-%H%M%S)"

python -m trainer.sample_data --fake_gcs_root="$fake_gcs" \
  --output=gs://sample-bucket/data --task=binary

python -m trainer.task --fake_gcs_root="$fake_gcs" \
  --train_data='gs://sample-bucket/data/train-*.tfrecord' \
  --validation_data='gs://sample-bucket/data/eval-*.tfrecord' \
  --label=label --task=binary --job_dir="$job_dir" \
  --train_steps=2000 --steps_per_loop=200 --eval_every_steps=1000 --seed=42 "$@"

# The exported model is read back with TensorFlow alone, as a server would.
python scripts/predict.py --model_dir="$fake_gcs/${job_dir#gs://}/model" \
  --examples="$fake_gcs/sample-bucket/data/eval-*.tfrecord" --label=label --num=8
