"""Predictions of an exported model, and Vertex AI request bodies tested offline.

Loads the model with TensorFlow alone, the way a server does, and answers bodies with
the serving image's own decoder (`trainer.serving.bodies`, which needs TensorFlow only):

    python -m trainer.predict --model_dir=DIR --examples='data/eval-*.tfrecord' --num=5
    python -m trainer.predict --model_dir=DIR --examples=... --request=vertex > body.json
    python -m trainer.predict --model_dir=DIR --examples=... --request=raw > raw.json
    python -m trainer.predict --model_dir=DIR --body=body.json
    python -m trainer.predict --model_dir=DIR --examples=... --endpoint=http://127.0.0.1:8080
    python -m trainer.predict --model_dir=DIR --examples=... --explain

--request=vertex prints the body of an online prediction request (`serving_default`,
base64 serialized tf.Examples); --request=raw the rawPredict body of the `predict`
signature (raw named features). --body answers such a body from the local model the
way TF Serving's REST API decodes it, and prints the JSON response. --endpoint sends the
body to a running server instead (`python -m trainer.serve`, or the serving image).
--explain prints, per example, one JSON line: the prediction, the baseline's, and each
feature's contribution (sampled Shapley values, `trainer.serving.explain`), which add up to the
difference.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from trainer.base.quiet import quiet_stderr


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainer-predict", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--model_dir", required=True, help="SavedModel folder")
    parser.add_argument("--examples", help="glob of TFRecord files")
    parser.add_argument("--label", default=None, help="feature to show as the true value")
    parser.add_argument("--num", type=int, default=5)
    parser.add_argument(
        "--request",
        choices=("vertex", "raw"),
        help="print a request body for --examples instead of predictions",
    )
    parser.add_argument("--body", help="a JSON request body to answer, as TF Serving would")
    parser.add_argument(
        "--explain",
        action="store_true",
        help="each feature's contribution to each prediction of --examples",
    )
    parser.add_argument(
        "--orders", type=int, default=64, help="--explain: random feature orders per example"
    )
    parser.add_argument(
        "--endpoint",
        help="http://HOST:PORT of a running server "
        "(python -m trainer.serve): send it the --body, or the --request "
        "body of --examples (vertex unless said), and print its answer",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not args.body and not args.examples:
        parser.error("give --examples, or --body")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with quiet_stderr():  # imported once the flags are read: --help needs no TensorFlow
        import tensorflow as tf

        tf.constant(0)  # the runtime starts (and prints) on the first op, not at import

        from trainer.model import arithmetic
        from trainer.serving import bodies, client, explain

        arithmetic.compile_as_eager()  # as the job and the server compute
    try:
        model = tf.saved_model.load(args.model_dir)
        if args.body:
            with open(args.body) as f:
                body = json.load(f)
            print(
                json.dumps(
                    client.send(args.endpoint, body)
                    if args.endpoint
                    else bodies.answer(body, model)
                )
            )
            return 0
        records = client.read_records(args.examples, args.num)
        if args.explain:
            client.print_explanations(model, records, args.model_dir, args.orders)
            return 0
        if args.request == "raw":
            body = client.raw_body(records, args.model_dir, model)
        elif args.request == "vertex" or args.endpoint:
            body = client.vertex_body(records)
        else:
            client.print_predictions(model, records, args.model_dir, args.label)
            return 0
        print(json.dumps(client.send(args.endpoint, body) if args.endpoint else body))
    except (
        bodies.BodyError,
        explain.ExplainError,
        OSError,
        json.JSONDecodeError,
        tf.errors.OpError,
    ) as e:
        print(f"error: {e}".splitlines()[0], file=sys.stderr)
        return 2
    return 0


def run() -> None:
    """The console command."""
    sys.exit(main())


if __name__ == "__main__":
    run()
