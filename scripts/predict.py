"""Predictions of an exported model, and Vertex AI request bodies tested offline.

Uses TensorFlow alone (no import of `trainer`), the way TF Serving and Vertex AI
prediction load the model:

    python scripts/predict.py --model_dir=DIR --examples='data/eval-*.tfrecord' --num=5
    python scripts/predict.py --model_dir=DIR --examples=... --request=vertex > body.json
    python scripts/predict.py --model_dir=DIR --examples=... --request=raw > raw.json
    python scripts/predict.py --model_dir=DIR --body=body.json

--request=vertex prints the body of an online prediction request (`serving_default`,
base64 serialized tf.Examples); --request=raw the rawPredict body of the `predict`
signature (raw named features). --body answers such a body from the local model the
way TF Serving's REST API decodes it, and prints the JSON response.
"""

import argparse
import base64
import contextlib
import json
import os
import sys
import tempfile


class BodyError(ValueError):
    """A request body TF Serving would reject; the message says why."""


@contextlib.contextmanager
def quiet_stderr():
    """Hides what TensorFlow's C++ runtime prints while it starts (oneDNN, CUDA probes:
    not for a reader of predictions); shows it after all if the import fails."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            captured.seek(0)
            sys.stderr.write(captured.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
with quiet_stderr():
    import tensorflow as tf
    tf.constant(0)  # the runtime starts (and prints) on the first op, not at import


def read_records(pattern: str, num: int) -> list[bytes]:
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise BodyError(f"no file matches {pattern!r}")
    return [r.numpy() for r in tf.data.TFRecordDataset(files).take(num)]


def vertex_body(records: list[bytes]) -> dict:
    """Online prediction (serving_default): each instance a base64 serialized Example."""
    return {"instances": [{"b64": base64.b64encode(r).decode()} for r in records]}


def raw_body(records: list[bytes], model_dir: str, model) -> dict:
    """rawPredict of the `predict` signature: each instance the named raw features; a
    feature a record lacks gets the training default from the export's schema.json, and
    a variable-length one is cut or padded to its size (with "" or -1 for categories,
    NaN for numbers, which TF Serving's JSON accepts)."""
    spec = model.signatures["predict"].structured_input_signature[1]
    with tf.io.gfile.GFile(f"{model_dir.rstrip('/')}/schema.json") as f:
        schema = {feat["name"]: feat for feat in json.load(f)["features"]}
    instances = []
    for record in records:
        features = tf.train.Example.FromString(record).features.feature
        instance = {}
        for name, tensor_spec in spec.items():
            kind = features[name].WhichOneof("kind") if name in features else None
            values = [_jsonable(v) for v in getattr(features[name], kind).value] if kind \
                else []
            size = tensor_spec.shape[1] if tensor_spec.shape.rank == 2 else 1
            feature = schema[name]
            if feature.get("varlen"):
                pad = (float("nan") if feature["kind"] == "numeric" else
                       "" if feature["dtype"] == "string" else -1)
                instance[name] = (values + [pad] * size)[:size]
                continue
            values = values or [feature["default"]] * size
            instance[name] = values if tensor_spec.shape.rank == 2 else values[0]
        instances.append(instance)
    return {"signature_name": "predict", "instances": instances}


def answer(body: dict, model) -> dict:
    """Answers a TF Serving REST predict body: row ('instances') or columnar ('inputs')
    format, {"b64": ...} objects as bytes, 'signature_name' honoured (default
    serving_default). Returns the response TF Serving would send, in row format.

    Raises:
      BodyError: naming what TF Serving would reject.
    """
    name = body.get("signature_name", "serving_default")
    if name not in model.signatures:
        raise BodyError(f"signature_name {name!r} is not in the model (it has "
                        f"{', '.join(sorted(model.signatures))})")
    signature = model.signatures[name]
    specs = signature.structured_input_signature[1]
    if "instances" in body:
        columns = _columns(body["instances"], specs)
    elif "inputs" in body:
        inputs = body["inputs"]
        columns = inputs if isinstance(inputs, dict) else {next(iter(specs)): inputs}
    else:
        raise BodyError('the body has neither "instances" nor "inputs"')
    missing, extra = set(specs) - set(columns), set(columns) - set(specs)
    if missing or extra:
        raise BodyError(f"signature {name!r} takes {sorted(specs)}; the body is missing "
                        f"{sorted(missing)} and has unknown {sorted(extra)}")
    tensors = {k: tf.constant(_decode(columns[k]), dtype=s.dtype) for k, s in specs.items()}
    outputs = {k: v.numpy().tolist() for k, v in signature(**tensors).items()}
    rows = [dict(zip(outputs, values)) for values in zip(*outputs.values())]
    predictions = [_jsonable(next(iter(r.values())) if len(r) == 1 else r) for r in rows]
    return {"predictions": predictions}


def _columns(instances: list, specs: dict) -> dict:
    if not isinstance(instances, list) or not instances:
        raise BodyError('"instances" must be a non-empty list')
    single = next(iter(specs)) if len(specs) == 1 else None
    columns: dict = {}
    for i, instance in enumerate(instances):
        if single and not (isinstance(instance, dict) and single in instance):
            instance = {single: instance}  # one input: each instance is its value
        if not isinstance(instance, dict):
            raise BodyError(f"instances[{i}] is not an object of named inputs "
                            f"({sorted(specs)})")
        for key, value in instance.items():
            columns.setdefault(key, []).append(value)
    if len({len(v) for v in columns.values()}) > 1:
        raise BodyError("every instance must name the same inputs")
    return columns


def _decode(value):
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise BodyError(f"an object value must be {{\"b64\": ...}}, not {sorted(value)}")
        return base64.b64decode(value["b64"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _jsonable(v):
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v


def print_predictions(model, records: list[bytes], model_dir: str, label: str | None) -> None:
    outputs = model.signatures["serving_default"](examples=tf.constant(records))
    print(f"predictions of {model_dir} (signature serving_default):")
    for i, record in enumerate(records):
        line = f"  example {i}: prediction={_value(outputs['predictions'][i])}"
        if "probabilities" in outputs:
            line += f" probabilities={[round(float(p), 3) for p in outputs['probabilities'][i]]}"
        if label:
            feature = tf.train.Example.FromString(record).features.feature[label]
            kind = feature.WhichOneof("kind")
            line += f" true={_value(getattr(feature, kind).value[0]) if kind else '?'}"
        print(line)


def _value(v):
    v = v.numpy() if hasattr(v, "numpy") else v
    if hasattr(v, "item"):
        v = v.item()  # NumPy scalar to Python
    if isinstance(v, bytes):
        return v.decode()
    return round(v, 4) if isinstance(v, float) else v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="SavedModel folder")
    parser.add_argument("--examples", help="glob of TFRecord files")
    parser.add_argument("--label", default=None, help="feature to show as the true value")
    parser.add_argument("--num", type=int, default=5)
    parser.add_argument("--request", choices=("vertex", "raw"),
                        help="print a request body for --examples instead of predictions")
    parser.add_argument("--body", help="a JSON request body to answer, as TF Serving would")
    args = parser.parse_args()
    if not args.body and not args.examples:
        parser.error("give --examples, or --body")
    try:
        model = tf.saved_model.load(args.model_dir)
        if args.body:
            with open(args.body) as f:
                body = json.load(f)
            print(json.dumps(answer(body, model)))
            return 0
        records = read_records(args.examples, args.num)
        if args.request == "vertex":
            print(json.dumps(vertex_body(records)))
        elif args.request == "raw":
            print(json.dumps(raw_body(records, args.model_dir, model)))
        else:
            print_predictions(model, records, args.model_dir, args.label)
    except (BodyError, OSError, json.JSONDecodeError, tf.errors.OpError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
