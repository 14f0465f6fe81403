"""Knowing the model: metrics exact under every strategy (metrics), Vertex's evaluation
schema (evaluation), permutation importance (importance), the data's profile (profile),
per-prediction attributions (explain) and model_dir/report.html (report).

Imports: trainer.base, trainer.data, trainer.model.
"""
