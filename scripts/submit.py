"""Submits the trainer to Vertex AI: `trainer-submit` (trainer/vertex/submit_command.py),
run from the checkout."""

from trainer.vertex.submit_command import run

if __name__ == "__main__":
    run()
