"""A TensorFlow training package for Vertex AI custom jobs that runs the same locally.

The `python -m` entry points live here, at the top: `task` (train), `serve` (answer
predictions), `prepare` (tables to TFRecords), `report` (rebuild report.html),
`sample_data` and `bootstrap` (the training image's start). They read flags and call
the subpackages, which never import them. The subpackages, lowest first; each imports
only those before it (tests/test_layers.py holds the order):

    base      the user's Config, file I/O, the names of what the outside world reads
    data      schema, records, the input pipeline, splits          (base)
    prep      tables to TFRecords, locally or on Beam               (base)
    model     heads, the built-in models, optimizers                (base, data)
    evaluate  metrics, evaluation.json, importance, report.html     (base, data, model)
    serving   the SavedModel export, request bodies, the server     (base, data, model)
    plan      everything read and decided before a model is built   (all of the above)
    train     the step, inner and outer loops, checkpoints, the job (all of the above)
    vertex    Vertex AI clients of the `submit` extra               (base; never imported
              by a training job)
"""

__version__ = "0.1.0"
