"""A TensorFlow training package for Vertex AI custom jobs that runs the same locally."""

__version__ = "0.1.0"
