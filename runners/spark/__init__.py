"""A portable Apache Beam runner on PySpark.

``beam.Pipeline(runner=runners.spark.SparkRunner())`` or
``--runner=runners.spark.SparkRunner``. Importing this package does not start
Spark; a session is created (or the active one reused) when a pipeline runs.
"""

from runners.spark.options import SparkOptions
from runners.spark.runner import SparkPipelineResult, SparkRunner

__all__ = ["SparkOptions", "SparkPipelineResult", "SparkRunner"]
