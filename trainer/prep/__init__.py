"""Tabular data to TFRecords of `tf.train.Example` (`python -m trainer.prepare`).

sources (CSV, Parquet, BigQuery -> Arrow record batches) -> columns (Arrow columns ->
typed feature columns) -> encode (feature columns -> serialized Examples, vectorised)
-> splits (which split each row goes to) -> shards (sharded TFRecord files), run by
`local` in this process or by `beam` on Apache Beam (Dataflow).

Imports: trainer.base.
"""
