"""Where a real job's training step spends its time, op by op (TensorFlow's profiler).

`trainer.task` runs as usual (same flags); inner loops --first to --last of the networks'
training (after the first, which traces) run under `tf.profiler`, and the ops the
compiled loop ran there are summed by kind (MatMul, Mul, ...) and by layer, with the
share that matrix products take. docs/results/2026-12-07-networks-cost.md read the
default step's cost this way.

    python -m benchmarks.op_profile --train_data=... --label=target --task=regression \\
        --job_dir=/tmp/profiled --trees=off
"""

from __future__ import annotations

import collections
import dataclasses
import glob
import os
import re
import tempfile
import time

import tensorflow as tf
from absl import app, flags

from benchmarks import step
from trainer.base import cli
from trainer.train import loops as loops_lib

FLAGS = flags.FLAGS


@dataclasses.dataclass
class Profile:
    """Op time (seconds, summed over the threads that ran them) by kind and by layer."""

    by_kind: collections.Counter
    by_layer: collections.Counter
    calls: collections.Counter

    @property
    def total(self) -> float:
        return sum(self.by_kind.values())

    @property
    def products(self) -> float:
        """The matrix products' time (kinds such as `_MklMatMul` hold step.PRODUCTS' names)."""
        return sum(s for kind, s in self.by_kind.items() if any(p in kind for p in step.PRODUCTS))


def read(logdir: str, scope: str = "/body/") -> Profile:
    """The ops of the newest profile under `logdir` whose names hold `scope` (the
    compiled loop's body), from the host plane's compute threads."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    by_kind: collections.Counter = collections.Counter()
    by_layer: collections.Counter = collections.Counter()
    calls: collections.Counter = collections.Counter()
    for plane in space.planes:
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue
            for event in line.events:
                name = names.get(event.metadata_id, "")
                if ":" not in name or scope not in name:
                    continue  # an executor's own span, not an op
                op, kind = name.rsplit(":", 1)
                seconds = event.duration_ps / 1e12
                by_kind[kind] += seconds
                calls[kind] += 1
                by_layer[_layer(op)] += seconds
    return Profile(by_kind, by_layer, calls)


def _layer(op: str) -> str:
    """'while/body/_1/gradient_tape/while/tabular_1/hidden_1_1/MatMul/MatMul' ->
    'backward hidden_1'; the optimizer's ops -> 'optimizer'."""
    parts = re.sub(r"while/body/_\d+/", "", op).split("/")
    backward = parts[0] == "gradient_tape"
    parts = [p for p in parts if p not in ("gradient_tape", "while")]
    if parts and parts[0].startswith(("adam", "sgd", "optimizer")):
        return "optimizer"
    name = re.sub(
        r"_\d+$", "", parts[1] if len(parts) > 1 and parts[0].startswith("tabular") else parts[0]
    )
    return f"{'backward' if backward else 'forward'} {name}"


def table(
    counter: collections.Counter, total: float, top: int, calls: collections.Counter | None = None
) -> str:
    """A markdown table of `counter`'s `top` rows, seconds and share of `total` (and
    `calls`, for op kinds)."""
    rows = [f"| {'op' if calls else 'layer'} | seconds | share |{' calls |' if calls else ''}"]
    rows.append(f"| --- | --- | --- |{' --- |' if calls else ''}")
    for name, seconds in counter.most_common(top):
        extra = f" {calls[name]:,} |" if calls else ""
        rows.append(f"| {name} | {seconds:.3f} | {seconds / total:.1%} |{extra}")
    return "\n".join(rows)


def define_flags() -> None:
    """This benchmark's flags; the job's own come with trainer.task. Defined when run, not
    on import: the tests import modules whose flags share the job's names."""
    flags.DEFINE_integer("first", 4, "The first inner loop profiled (1: the one that traces).")
    flags.DEFINE_integer("last", 6, "The last inner loop profiled.")
    flags.DEFINE_integer("top", 15, "Rows per table.")


def main(argv):
    from trainer import task

    logdir = tempfile.TemporaryDirectory(prefix="op_profile-")
    timing: dict = {}
    make_loops = loops_lib.Loops.__init__

    def profiled_loops(self, *args, **kwargs):  # the job's own Loops, its train wrapped
        make_loops(self, *args, **kwargs)
        if "calls" in timing:
            return  # the blend's and the export's Loops: not the training
        train, timing["calls"] = self.train, 0

        def train_profiled(iterator, num_steps):
            timing["calls"] += 1
            if timing["calls"] == FLAGS.first:
                tf.profiler.experimental.start(logdir.name)
                timing["start"], timing["steps"] = time.perf_counter(), 0
            loss = train(iterator, num_steps)
            if FLAGS.first <= timing["calls"] <= FLAGS.last:
                timing["steps"] += int(num_steps)
            if timing["calls"] == FLAGS.last:
                loss.numpy()
                timing["seconds"] = time.perf_counter() - timing["start"]
                tf.profiler.experimental.stop()
            return loss

        self.train = train_profiled

    loops_lib.Loops.__init__ = profiled_loops
    code = task.main(argv)
    if code:
        raise SystemExit(code)
    if "seconds" not in timing:
        raise SystemExit(f"the job ran {timing.get('calls', 0)} inner loops; --last={FLAGS.last}")
    with logdir:
        profile = read(logdir.name)
    print(
        f"\n{timing['steps']:,} steps in {timing['seconds']:.2f} s "
        f"({timing['seconds'] / timing['steps'] * 1e3:.2f} ms a step); op time "
        f"{profile.total:.2f} s over the compute threads, matrix products "
        f"{profile.products / profile.total:.0%} of it\n"
    )
    print(table(profile.by_kind, profile.total, FLAGS.top, profile.calls))
    print()
    print(table(profile.by_layer, profile.total, FLAGS.top))


if __name__ == "__main__":
    import trainer.task  # noqa: F401  (defines the job's flags)

    define_flags()
    app.run(main, flags_parser=cli.parse_flags)
