"""Vertex AI for the trainer: job requests, checks and staging (scripts/submit.py);
export checks, Model Registry, endpoint and batch prediction requests (scripts/deploy.py).
Not shipped in the trainer sdist: jobs need none of it."""
