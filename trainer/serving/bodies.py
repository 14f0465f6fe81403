"""Prediction request bodies, answered by an exported model the way Vertex AI expects.

One decoder for the serving image's server (`trainer/server.py`) and for
`trainer.predict --body`, so a body tested offline is answered the same online. It
follows TF Serving's REST predict API, which Vertex's prebuilt TensorFlow images ran:
row (`instances`) or columnar (`inputs`) format, `{"b64": ...}` objects as bytes, answers
in row format. The signature is `signature_name` at the top of the body (a rawPredict
body) or in `parameters` (an online predict body, which Vertex passes on with only
`instances` and `parameters`); `serving_default` when neither names one.

Imports TensorFlow and the standard library only: it runs beside TensorFlow 2.15.1 in the
serving compatibility test, where the rest of the package is not installed.
"""

from __future__ import annotations

import base64
import binascii
import re

import tensorflow as tf

from trainer.base import contracts

DEFAULT_SIGNATURE = contracts.SERVING_DEFAULT
NOT_AN_EXAMPLE = "not a serialized tf.Example"


class BodyError(ValueError):
    """A request body that cannot be answered; the message names the culprit in one line."""


def signature_name(body: dict) -> str:
    """The signature a body asks for: top-level or in `parameters`."""
    parameters = body.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise BodyError('"parameters" must be an object')
    name = body.get("signature_name", parameters.get("signature_name", DEFAULT_SIGNATURE))
    if not isinstance(name, str):
        raise BodyError(f"signature_name {name!r} is not a string")
    return name


def answer(body, model) -> dict:
    """Answers a predict body with `model` (a loaded SavedModel).

    Returns:
      {"predictions": [...]}, one entry per instance: the single output's value, or an
      object of the outputs (`predictions`, `probabilities`).

    Raises:
      BodyError: naming the instance, input or field at fault.
    """
    if not isinstance(body, dict):
        raise BodyError(f"the body must be a JSON object, not {type(body).__name__}")
    name = signature_name(body)
    if name not in model.signatures:
        raise BodyError(
            f"signature_name {name!r} is not in the model (it has "
            f"{', '.join(sorted(model.signatures))})"
        )
    signature = model.signatures[name]
    specs = signature.structured_input_signature[1]
    if "instances" in body:
        columns = _columns(body["instances"], specs, name)
    elif "inputs" in body:
        inputs = body["inputs"]
        columns = inputs if isinstance(inputs, dict) else {next(iter(specs)): inputs}
        missing, extra = set(specs) - set(columns), set(columns) - set(specs)
        if missing or extra:
            raise BodyError(
                f"signature {name!r} takes {sorted(specs)}; the body is missing "
                f"{sorted(missing)} and has unknown {sorted(extra)}"
            )
    else:
        raise BodyError('the body has neither "instances" nor "inputs"')
    tensors = {key: _tensor(key, columns[key], spec) for key, spec in specs.items()}
    try:
        outputs = signature(**tensors)
    # A corrupted serialized Example makes TensorFlow's parse error quote bytes that are
    # not UTF-8: the error itself then fails to decode (found by tests/test_fuzz.py).
    except (tf.errors.InvalidArgumentError, UnicodeDecodeError) as e:
        raise BodyError(_culprit(signature, tensors, e)) from None
    # Column by column: only string outputs (the classes) need decoding, and a generic
    # walk over every number cost more than the model itself on 100 instances.
    answers = [
        jsonable(v.numpy().tolist()) if v.dtype == tf.string else v.numpy().tolist()
        for v in outputs.values()
    ]
    if len(answers) == 1:
        return {"predictions": answers[0]}
    names = list(outputs)
    return {"predictions": [dict(zip(names, row)) for row in zip(*answers)]}


def _columns(instances, specs: dict, name: str) -> dict:
    if not isinstance(instances, list) or not instances:
        raise BodyError('"instances" must be a non-empty list')
    single = next(iter(specs)) if len(specs) == 1 else None
    columns: dict = {key: [] for key in specs}
    for i, instance in enumerate(instances):
        if single and not (isinstance(instance, dict) and single in instance):
            instance = {single: instance}  # one input: each instance is its value
        if not isinstance(instance, dict):
            raise BodyError(f"instances[{i}] is not an object of named inputs ({sorted(specs)})")
        missing, extra = set(specs) - set(instance), set(instance) - set(specs)
        if missing or extra:
            raise BodyError(
                f"instances[{i}]: signature {name!r} takes {sorted(specs)}; the "
                f"body is missing {sorted(missing)} and has unknown "
                f"{sorted(extra)}"
            )
        for key, value in instance.items():
            columns[key].append(value)
    return columns


def _tensor(key: str, values, spec: tf.TensorSpec) -> tf.Tensor:
    """One input as a tensor of its signature's dtype and shape, or a BodyError naming
    the input (and the first instance whose value does not fit)."""
    if not isinstance(values, list):
        raise BodyError(f"input {key!r}: expected a list of values, one per instance")
    size = spec.shape[1] if spec.shape.rank == 2 else None
    for i, value in enumerate(values):
        if size is None and isinstance(value, list):
            raise BodyError(f"instances[{i}] input {key!r}: expected one value, got a list")
        if size is not None and not (isinstance(value, list) and len(value) == size):
            raise BodyError(f"instances[{i}] input {key!r}: expected a list of {size} values")
    try:
        return tf.constant(_decode(values), dtype=spec.dtype)
    except BodyError:
        raise
    except (ValueError, TypeError, tf.errors.OpError):
        pass
    for i, value in enumerate(values):
        try:
            tf.constant(_decode([value]), dtype=spec.dtype)
        except (ValueError, TypeError, tf.errors.OpError):
            raise BodyError(
                f"instances[{i}] input {key!r}: {_short(value)} is not {_kind(spec.dtype)}"
            ) from None
    raise BodyError(f"input {key!r}: values are not {_kind(spec.dtype)}")


def _culprit(signature, tensors: dict, error: Exception) -> str:
    """The first instance the model rejects on its own (e.g. a b64 string that is no
    serialized tf.Example), found by answering the instances one by one."""
    n = int(next(iter(tensors.values())).shape[0])
    for i in range(n):
        try:
            signature(**{k: v[i : i + 1] for k, v in tensors.items()})
        except (tf.errors.InvalidArgumentError, UnicodeDecodeError) as e:
            return f"instances[{i}]: {_reason(e)}"
    return _reason(error)


def _reason(error: Exception) -> str:
    """TensorFlow's message in one line, without its "Graph execution error" preamble
    and op names."""
    if isinstance(error, UnicodeDecodeError):  # its message quoted the binary value
        return NOT_AN_EXAMPLE
    text = re.sub(r"\s*\[Op:[^\]]*\]", "", getattr(error, "message", "") or str(error))
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and line.strip() != "Graph execution error:"
    ]
    line = lines[0] if lines else type(error).__name__
    # Its value is binary: cut, not shown. What the value is not says enough.
    line = re.sub(r"Could not parse example input, value: .*", NOT_AN_EXAMPLE, line)
    return line if len(line) <= 200 else line[:197] + "..."


def _decode(value):
    if isinstance(value, dict):
        if set(value) != {"b64"}:
            raise BodyError(f'an object value must be {{"b64": ...}}, not {sorted(value)}')
        try:
            return base64.b64decode(value["b64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BodyError(f"{_short(value)} is not valid base64") from None
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _kind(dtype: tf.DType) -> str:
    return {tf.string: 'a string (or {"b64": ...})', tf.int64: "an integer"}.get(dtype, "a number")


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def jsonable(v):
    if isinstance(v, dict):
        return {k: jsonable(x) for k, x in v.items()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return v
