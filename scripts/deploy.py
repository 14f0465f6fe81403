"""Registers and serves an export on Vertex AI: `trainer-deploy`
(trainer/vertex/deploy_command.py), run from the checkout."""

from trainer.vertex.deploy_command import run

if __name__ == "__main__":
    run()
