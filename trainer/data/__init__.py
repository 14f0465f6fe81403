"""The data a job reads: the feature schema (schema, inferred or given; exact_values),
the order of training records (records), TFRecords to batches (inputs), and which
records train, validate and test (splits).

Imports: trainer.base.
"""
