"""Container images: the package's own (train and serve, CPU and GPU) and Google's
retired prebuilt TensorFlow images, with the dates Vertex AI stops accepting them.

The package's images are built from containers/Dockerfile by containers/cloudbuild.yaml
into an Artifact Registry repository of the job's region, so their names follow from
the project and the region. Google's prebuilt images are still accepted as an option
until their end of availability; past it, Vertex refuses them, so the checks do too.
"""

from __future__ import annotations

import datetime
import re

import trainer

# Read 2026-12-03 from Vertex AI's documentation: "Supported frameworks list" (prebuilt
# containers for custom training) and "Prebuilt containers for inference and explanation"
# (prediction). No TensorFlow training image newer than 2.17, nor prediction image newer
# than 2.15, exists.
SOURCE = (
    "Vertex AI documentation, 'Supported frameworks list' and 'Prebuilt containers "
    "for inference', read 2026-12-03"
)
TRAINING_END_OF_AVAILABILITY = {
    (2, 17): datetime.date(2026, 7, 11),
    (2, 16): datetime.date(2026, 6, 28),
    (2, 14): datetime.date(2025, 9, 26),
    (2, 13): datetime.date(2025, 7, 5),
    (2, 12): datetime.date(2025, 6, 30),
}
PREDICTION_END_OF_AVAILABILITY = {
    (2, 15): datetime.date(2027, 1, 14),
    (2, 14): datetime.date(2027, 1, 14),
    (2, 13): datetime.date(2025, 11, 28),
    (2, 12): datetime.date(2025, 6, 30),
    (2, 11): datetime.date(2024, 11, 15),
    (2, 10): datetime.date(2024, 11, 15),
}
_PREBUILT = {
    "training": (
        re.compile(r"/vertex-ai/training/tf-(cpu|gpu)\.(\d+)-(\d+)"),
        TRAINING_END_OF_AVAILABILITY,
    ),
    "prediction": (
        re.compile(r"/vertex-ai/prediction/tf2-(cpu|gpu)\.(\d+)-(\d+)"),
        PREDICTION_END_OF_AVAILABILITY,
    ),
}
# The package's images: <region>-docker.pkg.dev/<project>/<repository>/<role>-<cpu|gpu>
ROLES = ("train", "serve")
DEFAULT_REPOSITORY = "trainer"
# The TensorFlow the images install (containers/Dockerfile's TF_VERSION; a test holds
# the two equal).
IMAGE_TF_VERSION = "2.21.0"
# Every build tags its images <package version>-tf<TF version> beside `latest`; submit
# and deploy default to that tag, so a job runs the TensorFlow its code was tested with.
PINNED_TAG = f"{trainer.__version__}-tf{IMAGE_TF_VERSION}"
DEFAULT_TAG = PINNED_TAG
_OWN = re.compile(r"/(train|serve)-(cpu|gpu)(:|@|$)")
_PINNED = re.compile(r"/(?:train|serve)-(?:cpu|gpu):([^@]+)-tf([\w.]+)$")


def own_image(
    project: str,
    region: str,
    role: str,
    gpu: bool,
    repository: str = DEFAULT_REPOSITORY,
    tag: str = DEFAULT_TAG,
) -> str:
    """The name of one of the package's images in the region's Artifact Registry."""
    if role not in ROLES:
        raise ValueError(f"role {role!r}: expected one of {ROLES}")
    return f"{region}-docker.pkg.dev/{project}/{repository}/{role}-{'gpu' if gpu else 'cpu'}:{tag}"


def pinned_version(image: str) -> tuple[str, str] | None:
    """(package version, TF version) of one of the package's images named by a pinned
    tag, else None (`latest`, a digest, another image)."""
    m = _PINNED.search(image)
    return (m[1], m[2]) if m else None


def version_mismatch(image: str, sdist: str | None) -> str | None:
    """One line when the staged sdist (trainer-<version>.tar.gz) is another version of
    the package than the pinned image was built with, else None."""
    pinned = pinned_version(image)
    m = re.fullmatch(r"trainer-(.+)\.tar\.gz", (sdist or "").rsplit("/", 1)[-1])
    if not pinned or not m or m[1] == pinned[0]:
        return None
    return (
        f"the staged package is trainer {m[1]} but {image} was built for trainer "
        f"{pinned[0]} (TensorFlow {pinned[1]}): the job installs {m[1]} over it; its "
        "dependencies are the image's"
    )


def own_kind(image: str) -> tuple[str, str] | None:
    """(role, 'cpu' or 'gpu') of an image named like the package's, else None."""
    m = _OWN.search(image)
    return (m[1], m[2]) if m else None


def prebuilt(image: str, use: str) -> tuple[str, tuple[int, int]] | None:
    """('cpu' or 'gpu', TF version) of one of Google's prebuilt TF images for `use`
    ('training' or 'prediction'), else None."""
    m = _PREBUILT[use][0].search(image)
    return (m[1], (int(m[2]), int(m[3]))) if m else None


def end_of_availability(image: str, use: str) -> datetime.date | None:
    """The date Vertex stops accepting a prebuilt TF image for `use`; None for any other
    image. A version missing from the table but older than a listed one is retired no
    later than that one (versions are retired oldest first)."""
    found = prebuilt(image, use)
    if not found:
        return None
    table = _PREBUILT[use][1]
    version = found[1]
    if version in table:
        return table[version]
    later = [date for v, date in table.items() if v > version]
    return min(later) if later else None


def retired(image: str, use: str, today: datetime.date) -> str | None:
    """One line saying why Vertex no longer accepts `image`, or None if it does."""
    date = end_of_availability(image, use)
    if date is None or date > today:
        return None
    found = prebuilt(image, use)
    exact = found is not None and found[1] in _PREBUILT[use][1]
    return (
        f"{image} reached its end of availability {'on' if exact else 'by'} "
        f"{date.isoformat()} and Vertex AI no longer accepts it ({SOURCE})"
    )


if __name__ == "__main__":
    # The tag builds give the images: containers/cloudbuild.yaml, scripts/test_images.sh.
    print(PINNED_TAG)
