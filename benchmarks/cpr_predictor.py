"""The alternative measured beside trainer.serve: the aiplatform SDK's Custom Prediction
Routines model server (FastAPI on uvicorn, one process per worker) answering with the
same decoder, `trainer.serving.bodies`. Used by benchmarks/serving.py --cpr; needs the SDK's
prediction extra (`pip install -e '.[bench]'`)."""

from __future__ import annotations

import tensorflow as tf
from google.cloud.aiplatform.prediction.predictor import Predictor

from trainer.serving import bodies


class TrainerPredictor(Predictor):
    """Loads an export of trainer.task; answers a predict body as trainer.serve does."""

    def load(self, artifacts_uri: str) -> None:
        self._model = tf.saved_model.load(artifacts_uri)

    def predict(self, instances: dict) -> dict:
        return bodies.answer(instances, self._model)
