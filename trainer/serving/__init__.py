"""Serving: the SavedModel export and its signatures (export), Vertex request bodies
(bodies), the serving image's HTTP server (server) and its pre-forked workers (prefork).

Imports: trainer.base, trainer.data, trainer.model.
"""
