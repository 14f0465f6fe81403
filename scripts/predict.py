"""Predictions of an exported model, and Vertex AI request bodies tested offline.

Loads the model with TensorFlow alone, the way a server does, and answers bodies with
the serving image's own decoder (`trainer.bodies`, which needs TensorFlow only):

    python scripts/predict.py --model_dir=DIR --examples='data/eval-*.tfrecord' --num=5
    python scripts/predict.py --model_dir=DIR --examples=... --request=vertex > body.json
    python scripts/predict.py --model_dir=DIR --examples=... --request=raw > raw.json
    python scripts/predict.py --model_dir=DIR --body=body.json
    python scripts/predict.py --model_dir=DIR --examples=... --endpoint=http://127.0.0.1:8080
    python scripts/predict.py --model_dir=DIR --examples=... --explain

--request=vertex prints the body of an online prediction request (`serving_default`,
base64 serialized tf.Examples); --request=raw the rawPredict body of the `predict`
signature (raw named features). --body answers such a body from the local model the
way TF Serving's REST API decodes it, and prints the JSON response. --endpoint sends the
body to a running server instead (`python -m trainer.serve`, or the serving image).
--explain prints, per example, one JSON line: the prediction, the baseline's, and each
feature's contribution (sampled Shapley values, `trainer.explain`), which add up to the
difference.
"""

import argparse
import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainer.quiet import quiet_stderr  # noqa: E402  (standard library only)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
with quiet_stderr():
    import tensorflow as tf
    tf.constant(0)  # the runtime starts (and prints) on the first op, not at import

# The decoder of the serving image's server; it imports TensorFlow alone.
from trainer.bodies import BodyError, answer, jsonable  # noqa: E402
from trainer.explain import ExplainError, baseline, shapley  # noqa: E402


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
            values = [jsonable(v) for v in getattr(features[name], kind).value] if kind \
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


def print_explanations(model, records: list[bytes], model_dir: str, orders: int) -> None:
    if "predict" not in model.signatures:
        raise ExplainError(f"{model_dir}: no 'predict' signature (raw features) to explain; "
                           "export the model with trainer.task")
    instances = raw_body(records, model_dir, model)["instances"]
    with tf.io.gfile.GFile(f"{model_dir.rstrip('/')}/schema.json") as f:
        base = baseline(json.load(f), model.signatures["predict"].structured_input_signature[1])
    for i, instance in enumerate(instances):
        found = shapley(model, instance, base, orders=orders)
        found["contributions"] = dict(sorted(found["contributions"].items(),
                                             key=lambda kv: -abs(kv[1])))
        print(json.dumps({"example": i, **found}))


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


def send(endpoint: str, body: dict, timeout_s: float = 60.0) -> dict:
    """POSTs `body` to a running server (python -m trainer.serve, or the serving image)
    and returns its JSON answer. An endpoint without a path gets /predict.

    Raises:
      BodyError: naming the endpoint and the server's one-line error.
    """
    parts = urllib.parse.urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise BodyError(f"--endpoint={endpoint!r}: expected http://HOST:PORT[/ROUTE]")
    url = endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + "/predict"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return json.load(response)
    except urllib.error.HTTPError as e:
        try:
            why = json.load(e).get("error", "")
        except (ValueError, AttributeError):
            why = ""
        raise BodyError(f"{url} answered {e.code}: {why or e.reason}") from None
    except (urllib.error.URLError, OSError) as e:
        raise BodyError(f"cannot reach {url}: {getattr(e, 'reason', e)}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model_dir", required=True, help="SavedModel folder")
    parser.add_argument("--examples", help="glob of TFRecord files")
    parser.add_argument("--label", default=None, help="feature to show as the true value")
    parser.add_argument("--num", type=int, default=5)
    parser.add_argument("--request", choices=("vertex", "raw"),
                        help="print a request body for --examples instead of predictions")
    parser.add_argument("--body", help="a JSON request body to answer, as TF Serving would")
    parser.add_argument("--explain", action="store_true",
                        help="each feature's contribution to each prediction of --examples")
    parser.add_argument("--orders", type=int, default=64,
                        help="--explain: random feature orders per example")
    parser.add_argument("--endpoint", help="http://HOST:PORT of a running server "
                        "(python -m trainer.serve): send it the --body, or the --request "
                        "body of --examples (vertex unless said), and print its answer")
    args = parser.parse_args()
    if not args.body and not args.examples:
        parser.error("give --examples, or --body")
    try:
        model = tf.saved_model.load(args.model_dir)
        if args.body:
            with open(args.body) as f:
                body = json.load(f)
            print(json.dumps(send(args.endpoint, body) if args.endpoint
                             else answer(body, model)))
            return 0
        records = read_records(args.examples, args.num)
        if args.explain:
            print_explanations(model, records, args.model_dir, args.orders)
            return 0
        if args.request == "raw":
            body = raw_body(records, args.model_dir, model)
        elif args.request == "vertex" or args.endpoint:
            body = vertex_body(records)
        else:
            print_predictions(model, records, args.model_dir, args.label)
            return 0
        print(json.dumps(send(args.endpoint, body) if args.endpoint else body))
    except (BodyError, ExplainError, OSError, json.JSONDecodeError, tf.errors.OpError) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
