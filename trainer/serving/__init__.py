"""Serving: the SavedModel export and its signatures (export), Vertex request bodies
(bodies), the serving image's HTTP server (server) and its pre-forked workers (prefork),
per-prediction attributions over an export (explain), and a client of an export for
`trainer.predict` (client).

Imports: trainer.base, trainer.data, trainer.model.
"""
