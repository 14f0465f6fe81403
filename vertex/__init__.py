"""Vertex AI submission of the trainer: job requests, checks, staging. Not shipped in
the trainer sdist: jobs need none of it."""
