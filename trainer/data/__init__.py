"""The data a job reads: the feature schema (schema; inferred from a sample by
inference, with exact_values), the order of training records (records), TFRecords to
batches (inputs), samples and the search for bad records (scan), and which records
train, validate and test (splits).

Imports: trainer.base.
"""
