"""Training: the strategy (distribution), the per-replica step and the compiled inner
loops (loops, collectives), the outer loop (controller) and its actions (actions:
progress, summaries, validation and selection, checkpoints, preemption, history), the
boosted trees fitted and blended in at the end (forest), and one job from plan to
model_dir (job, model_dir; hypertune reports to Vertex tuning).

Imports: every subpackage but vertex.
"""
