"""millwheel-beam: Google's MillWheel model, Zeitgeist and Photon on Apache Beam."""

from setuptools import find_packages, setup

setup(
    name="millwheel-beam",
    version="0.1.0",
    description=(
        "MillWheel-style stateful stream processing (Zeitgeist, Photon) as "
        "Apache Beam transforms, with a portable Spark runner on PySpark."
    ),
    python_requires=">=3.11",
    packages=find_packages(include=["pipelines", "transforms*", "testing", "runners*"]),
    package_data={
        "transforms.records": ["*.proto"],
        "configs": ["*.yaml"],
        "testing": ["*.go"],
    },
    include_package_data=True,
    install_requires=[
        "apache-beam==2.77.0",
        "pyspark==4.3.0",
        "protobuf>=6.31,<7",
        "pyarrow>=15",
        "numpy>=1.26",
        "PyYAML>=6",
        # google-cloud-bigtable installs the `google.cloud` namespace, after
        # which Beam warns on every start that GCS and BigQuery clients are
        # half there; these complete them (gs:// paths then work too), at the
        # versions Beam's own `gcp` extra pins.
        "google-cloud-storage>=2.18.2,<4",
        "google-apitools>=0.5.31,<0.5.32; python_version < '3.13'",
        "google-apitools>=0.5.35; python_version >= '3.13'",
    ],
    extras_require={
        "bigtable": ["google-cloud-bigtable>=2.50,<3"],
        "report": ["matplotlib>=3.8"],
        "test": [
            "pytest>=8",
            "pytest-timeout>=2.3",
            # The suite's two workers (pyproject.toml's addopts).
            "pytest-xdist>=3.5",
            # Property tests (json_line against json.dumps).
            "hypothesis>=6",
            "ruff==0.17.6",
            # Generated *_pb2.py files are compared against this exact
            # generator in tests; bump both together.
            "grpcio-tools==1.81.1",
            "google-cloud-bigtable>=2.50,<3",
            # Beam's FnApiRunnerTest, userstate_test and util_test, run
            # against our Spark runner, need them.
            "pyhamcrest>=2",
            "tenacity>=8",
            "mock>=5",
            "parameterized>=0.9",
        ],
    },
)
