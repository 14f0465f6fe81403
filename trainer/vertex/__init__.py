"""Vertex AI clients, for the `submit` extra: job requests, checks and staging (submit
command); export checks, Model Registry, endpoint and batch prediction requests (deploy
command). A training job never imports this package.

Imports: trainer.base.
"""
