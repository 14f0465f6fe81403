#!/usr/bin/env bash
# The package's images, built and run here (CI runs this from .ci/run):
#  1. a Debian bookworm base made with debootstrap (public container registries are not
#     reachable from this machine; Debian's and Python's package registries are);
#  2. containers/Dockerfile built on it with buildah, both targets (train, serve), by the
#     same install script a Cloud Build uses;
#  3. the training image runs its entry point on the sample data (a staged sdist installed
#     at start, then trainer.task) for each task;
#  4. the serving image's entry point serves each export on loopback and
#     tests/image_serving.py checks its answers against the model in-process, its faults
#     and its load figures.
# Needs root (debootstrap, buildah's chroot isolation, overlay mounts). podman run cannot start containers
# in this sandbox (crun cannot set RLIMIT_NPROC), so `buildah run --isolation chroot` runs
# them, with the image's own entry point read from its config.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
started=$SECONDS

missing=()
for tool in podman buildah debootstrap; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (Debian packages)" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# Overlay storage where the kernel allows it (a code change then rebuilds in seconds), vfs
# (full copies, always works) where it does not; each in a store of its own.
storage() {
  echo --storage-driver="$1" --root="/var/lib/containers/trainer-$1" \
    --runroot="/run/containers/trainer-$1"
}
driver=vfs
probe=$(buildah $(storage overlay) from scratch 2>/dev/null) \
  && buildah $(storage overlay) mount "$probe" >/dev/null 2>&1 && driver=overlay
[ -n "${probe:-}" ] && buildah $(storage overlay) rm "$probe" >/dev/null 2>&1 || true
buildah=(buildah $(storage "$driver"))
echo "buildah storage: $driver" >&2
base=localhost/trainer-base:bookworm
train=localhost/trainer/train-cpu
serve=localhost/trainer/serve-cpu

if ! "${buildah[@]}" inspect --type image "$base" >/dev/null 2>&1; then
  echo "making the base image $base with debootstrap" >&2
  rootfs="$(mktemp -d)/rootfs"
  debootstrap --variant=minbase bookworm "$rootfs" >/dev/null
  tar -C "$rootfs" -c . | podman $(storage "$driver") import - "$base" >/dev/null
  rm -rf "$(dirname "$rootfs")"
fi

# buildah's layers are kept between runs on this machine (--layers): a run after a code
# change rebuilds the package's layer only; a new machine builds all, TensorFlow included.
ca="${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}"
build=("${buildah[@]}" bud --isolation chroot --layers --build-arg "BASE=$base"
       -f containers/Dockerfile)
[ -s "$ca" ] && build+=(-v "$ca:/run/build-ca.crt:ro")
# Tagged as a Cloud Build tags them: `latest` and the pinned <version>-tf<TF> that submit
# and deploy name by default.
pinned=$(python3 -m trainer.vertex.images)
for target in train serve; do
  echo "building the $target image ($pinned)" >&2
  image=$train; [ "$target" = serve ] && image=$serve
  mkdir -p "$root/.local"
  "${build[@]}" --target "$target" -t "$image" -t "$image:$pinned" . \
    > "$root/.local/images-$target.log" 2>&1 \
    || { tail -30 "$root/.local/images-$target.log" >&2; exit 1; }
  "${buildah[@]}" inspect --type image "$image:$pinned" >/dev/null
done
built=$SECONDS

work="$(mktemp -d)"
containers=()
cleanup() {
  pkill -f "trainer.serve --fake_gcs_root=$work" 2>/dev/null || true
  for c in "${containers[@]}"; do "${buildah[@]}" rm "$c" >/dev/null 2>&1 || true; done
  # Layers of older builds that no tag names any more (2 GB each with vfs).
  "${buildah[@]}" rmi --prune >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The entry point of image $1 as JSON, from its OCI config.
entrypoint_of() {
  "${buildah[@]}" inspect --type image "$1" | python3 -c "import json, sys; \
print(json.dumps(json.load(sys.stdin)['OCIv1']['config']['Entrypoint']))"
}

# Runs the entry point of image $1 (from its config, as Vertex would) with the remaining
# arguments, the work folder mounted at the same path, loopback shared.
run_entrypoint() {
  local image="$1" container entrypoint
  shift
  container=$("${buildah[@]}" from --pull-never "$image")
  containers+=("$container")
  entrypoint=$(entrypoint_of "$image" | python3 -c "import json, sys; \
print(' '.join(json.load(sys.stdin)))")
  "${buildah[@]}" run --isolation chroot --network host -v "$work:$work" \
    "${RUN_ENV[@]}" "$container" -- $entrypoint "$@"
}

gcs="$work/gcs"
mkdir -p "$gcs/bucket/staging"
python3 setup.py -q sdist --formats=gztar --dist-dir="$gcs/bucket/staging" >/dev/null 2>&1
sdist=$(basename "$(ls "$gcs"/bucket/staging/*.tar.gz)")
for task in regression binary multiclass; do
  echo "training the sample $task job in the training image" >&2
  RUN_ENV=(--env "TRAINER_PACKAGE_URI=gs://bucket/staging/$sdist")
  container=$("${buildah[@]}" from --pull-never "$train:$pinned")
  containers+=("$container")
  "${buildah[@]}" run --isolation chroot --network host -v "$work:$work" "$container" -- \
    python -m trainer.sample_data --fake_gcs_root="$gcs" --output="gs://bucket/$task" \
    --task="$task" --train_examples=2000 --eval_examples=500 > "$work/data-$task.log" 2>&1 \
    || { tail -30 "$work/data-$task.log" >&2; exit 1; }
  run_entrypoint "$train:$pinned" --fake_gcs_root="$gcs" --train_data="gs://bucket/$task/train-*" \
    --validation_data="gs://bucket/$task/eval-*" --label=label --task="$task" \
    --job_dir="gs://bucket/jobs/$task" --train_steps=300 --seed=1 > "$work/train-$task.log" 2>&1 \
    || { tail -30 "$work/train-$task.log" >&2; exit 1; }
  grep -q "installed the staged package gs://bucket/staging/$sdist" "$work/train-$task.log"
  test -f "$gcs/bucket/jobs/$task/model/saved_model.pb"
done
trained=$SECONDS

# The serving image, as Vertex starts it: settings from AIP_* variables. The checks
# start it once per export through this command.
RUN_ENV=()
serve_command() {
  local container
  container=$("${buildah[@]}" from --pull-never "$serve:$pinned")
  containers+=("$container")
  echo "${buildah[*]} run --isolation chroot --network host -v $work:$work $container --"
}
export IMAGE_SERVE_PREFIX="$(serve_command)"
export IMAGE_SERVE_ENTRYPOINT="$(entrypoint_of "$serve:$pinned")"
export IMAGE_GCS_ROOT="$gcs"
source "$root/scripts/env.sh"
python -m pytest tests/image_serving.py -q -s -p no:cacheprovider "$@"
echo "images: built in $((built - started)) s, trained 3 jobs in $((trained - built)) s," \
  "served and checked in $((SECONDS - trained)) s" >&2
