"""Batch jobs around the broker on PySpark: bulk scheduling, delivery audit, backlog forecast.

Optional: needs the ``spark`` extra (``pip install 'chronos-delay[spark]'``). The data sources
use Spark's Python Data Source API, so the same code runs on ``local[*]`` and on a cluster
whose executors have chronos installed.
"""

from __future__ import annotations

SPARK_HINT = (
    "the chronos pipeline needs PySpark 4 and pyarrow: pip install 'chronos-delay[spark]' "
    "(and Java 17 on the PATH)"
)


def require_spark() -> None:
    """Fail early with what to install, instead of an ImportError deep inside a job."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise ImportError(SPARK_HINT) from exc
