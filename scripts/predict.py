"""Predictions of an export and Vertex request bodies: `trainer-predict`
(python -m trainer.predict), run from the checkout."""

from trainer.predict import run

if __name__ == "__main__":
    run()
