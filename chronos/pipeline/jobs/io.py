"""Reading and writing job files by extension: Parquet, CSV, JSON Lines."""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from chronos.errors import ConfigError

FORMATS = ("parquet", "csv", "json")
_BY_SUFFIX = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def guess_format(path: str, given: str | None) -> str:
    """``given``, else from the suffix (a folder of part files: from the first file's suffix)."""
    if given is not None:
        return given
    local = Path(path)
    suffix = local.suffix.lower()
    if local.is_dir():
        suffixes = {p.suffix.lower() for p in local.iterdir() if not p.name.startswith(("_", "."))}
        suffixes &= set(_BY_SUFFIX)
        suffix = suffixes.pop() if len(suffixes) == 1 else suffix
    found = _BY_SUFFIX.get(suffix)
    if found is None:
        raise ConfigError(f"cannot tell the format of {path}; pass --format {'|'.join(FORMATS)}")
    return found


def read_table(spark: SparkSession, path: str, fmt: str | None) -> DataFrame:
    """The input table; CSV with a header row, JSON as JSON Lines."""
    kind = guess_format(path, fmt)
    if kind == "csv":
        return spark.read.option("header", "true").csv(path)
    if kind == "json":
        return spark.read.json(path)
    return spark.read.parquet(path)


def write_table(df: DataFrame, path: str) -> None:
    """Overwrite ``path``: JSON Lines when it ends in .json/.jsonl, else Parquet."""
    if Path(path).suffix.lower() in (".json", ".jsonl"):
        df.write.mode("overwrite").json(path)
    else:
        df.write.mode("overwrite").parquet(path)
