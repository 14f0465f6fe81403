"""Prints predictions of an exported model for a few TFRecord examples.

Uses TensorFlow alone (no import of `trainer`), the way TF Serving or Vertex AI
prediction load the model:

    python scripts/predict.py --model_dir=DIR --examples='data/eval-*.tfrecord' --num=5
"""

import argparse
import sys

import tensorflow as tf


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="SavedModel folder (local path)")
    parser.add_argument("--examples", required=True, help="glob of TFRecord files")
    parser.add_argument("--label", default=None, help="feature to show as the true value")
    parser.add_argument("--num", type=int, default=5)
    args = parser.parse_args()

    files = sorted(tf.io.gfile.glob(args.examples))
    if not files:
        print(f"error: no file matches {args.examples!r}", file=sys.stderr)
        return 2
    records = [r.numpy() for r in tf.data.TFRecordDataset(files).take(args.num)]
    serve = tf.saved_model.load(args.model_dir).signatures["serving_default"]
    outputs = serve(examples=tf.constant(records))
    print(f"predictions of {args.model_dir} (signature serving_default):")
    for i, record in enumerate(records):
        line = f"  example {i}: prediction={_value(outputs['predictions'][i])}"
        if "probabilities" in outputs:
            line += f" probabilities={[round(float(p), 3) for p in outputs['probabilities'][i]]}"
        if args.label:
            feature = tf.train.Example.FromString(record).features.feature[args.label]
            kind = feature.WhichOneof("kind")
            line += f" true={_value(getattr(feature, kind).value[0]) if kind else '?'}"
        print(line)
    return 0


def _value(v):
    v = v.numpy() if hasattr(v, "numpy") else v
    if hasattr(v, "item"):
        v = v.item()  # NumPy scalar to Python
    if isinstance(v, bytes):
        return v.decode()
    return round(v, 4) if isinstance(v, float) else v


if __name__ == "__main__":
    sys.exit(main())
