"""What every other part stands on: the user's `Config` (config), file I/O and the fake
Cloud Storage root (storage), the names the outside world reads (contracts: model_dir
files, signatures, metrics, Vertex's schemas and routes), and how the command-line entry
points speak (cli, quiet).

Imports: the standard library, absl, and TensorFlow only on first file access; nothing
else of the package.
"""
