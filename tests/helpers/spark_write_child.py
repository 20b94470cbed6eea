"""A Spark driver to be killed with SIGKILL mid-write: ``spark_write_child.py STORE``.

Writes 2 partitions of rows (topic ``killed``) to the rocketstore format at
STORE: partition 0 stages its file and finishes; partition 1 blocks for ever
once its staging file is open. The test kills the whole process group (this
interpreter, its JVM and Python workers) once both staging files exist, so the
commit never runs and the job's staging directory stays behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time


def main() -> None:
    path = sys.argv[1]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from rocketstore.spark import RocketStoreDataSource

    # A killed driver never cleans up: its scratch files (the block manager's
    # and the JVM's temporary folders) go where the test run's temporary
    # files go (TMPDIR, inherited from the test), never to the system's.
    scratch = tempfile.mkdtemp(prefix="spark-")
    spark = (SparkSession.builder.master("local[2]").appName("killed-writer")
             .config("spark.ui.enabled", "false")
             .config("spark.local.dir", scratch)
             .config("spark.driver.extraJavaOptions", f'"-Djava.io.tmpdir={scratch}"')
             .getOrCreate())
    spark.dataSource.register(RocketStoreDataSource)

    @F.udf("binary")
    def body(i: int) -> bytes:
        if i >= 50:
            while True:  # partition 1: hold the task until the process is killed
                time.sleep(1)
        return f"k{i}".encode()

    df = (spark.range(0, 100, numPartitions=2)
          .select(F.lit("killed").alias("topic"), body("id").alias("body")))
    print("WRITING", flush=True)
    (df.write.format("rocketstore").option("mapped_file_size_commit_log", str(64 * 1024))
     .mode("append").save(path))
    print("COMMITTED", flush=True)  # never reached: the test kills us first


if __name__ == "__main__":
    main()
