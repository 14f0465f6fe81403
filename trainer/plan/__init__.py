"""The plan stage: everything a job reads and decides before a model is built, in one
frozen `Plan` (plan), and the rules that fill in what the user left unset, each with its
reason (defaults).

Imports: trainer.base, trainer.data, trainer.model.
"""
