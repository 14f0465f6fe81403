"""A client of an export: its predictions, Vertex request bodies for it, and a running
server's answers to them (the library of `python -m trainer.predict`)."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request

import tensorflow as tf

from trainer.base import contracts
from trainer.base import storage as storage_lib
from trainer.data import schema as schema_lib
from trainer.serving.bodies import BodyError, jsonable
from trainer.serving.explain import ExplainError, baseline, shapley


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
    feature a record lacks gets the training default from the export's schema.json (NaN
    for one marked `missing`), and a variable-length one is cut or padded to its size
    (with "" or -1 for categories, NaN for numbers, which TF Serving's JSON accepts)."""
    spec = model.signatures[contracts.PREDICT].structured_input_signature[1]
    with tf.io.gfile.GFile(storage_lib.join(model_dir, contracts.SCHEMA_FILE)) as f:
        schema = {feat["name"]: feat for feat in json.load(f)["features"]}
    instances = []
    for record in records:
        features = tf.train.Example.FromString(record).features.feature
        instance = {}
        for name, tensor_spec in spec.items():
            kind = features[name].WhichOneof("kind") if name in features else None
            values = [jsonable(v) for v in getattr(features[name], kind).value] if kind else []
            size = tensor_spec.shape[1] if tensor_spec.shape.rank == 2 else 1
            feature = schema[name]
            if feature.get("varlen"):
                pad = schema_lib.pad_value(feature["kind"], feature["dtype"])
                instance[name] = (values + [pad] * size)[:size]
                continue
            default = float("nan") if feature.get("missing") else feature["default"]
            values = values or [default] * size
            instance[name] = values if tensor_spec.shape.rank == 2 else values[0]
        instances.append(instance)
    return {"signature_name": contracts.PREDICT, "instances": instances}


def print_explanations(model, records: list[bytes], model_dir: str, orders: int) -> None:
    if contracts.PREDICT not in model.signatures:
        raise ExplainError(
            f"{model_dir}: no 'predict' signature (raw features) to explain; "
            "export the model with trainer.task"
        )
    instances = raw_body(records, model_dir, model)["instances"]
    with tf.io.gfile.GFile(storage_lib.join(model_dir, contracts.SCHEMA_FILE)) as f:
        base = baseline(
            json.load(f), model.signatures[contracts.PREDICT].structured_input_signature[1]
        )
    for i, instance in enumerate(instances):
        found = shapley(model, instance, base, orders=orders)
        found["contributions"] = dict(
            sorted(found["contributions"].items(), key=lambda kv: -abs(kv[1]))
        )
        print(json.dumps({"example": i, **found}))


def print_predictions(model, records: list[bytes], model_dir: str, label: str | None) -> None:
    outputs = model.signatures[contracts.SERVING_DEFAULT](examples=tf.constant(records))
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
    url = (
        endpoint if parts.path not in ("", "/") else endpoint.rstrip("/") + contracts.PREDICT_ROUTE
    )
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
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
