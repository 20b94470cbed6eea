"""A Spark driver to be killed with SIGKILL in the JVM sink's commit:
``spark_sink_child.py SRC DST CHECKPOINT SEGMENT``.

Streams every message of SRC (one micro-batch, Trigger.AvailableNow) through
the JVM connector's source into its sink at DST (CommitLog segments of
SEGMENT bytes). It boots its SparkSession first, prints ``READY`` and
starts the stream only when a line comes on stdin (the test boots it while
other tests run, and fills SRC meanwhile). The test kills the whole process
group (this interpreter and its JVM) once the sink's append has rolled a
few CommitLog segments: the micro-batch is then neither fully appended nor
recorded as committed.
"""

from __future__ import annotations

import os
import sys
import tempfile


def main() -> None:
    src, dst, ckpt, segment = sys.argv[1:5]
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from rocketstore.spark import configure

    # A killed driver never cleans up: its scratch files go where the test
    # run's temporary files go (TMPDIR, inherited from the test).
    scratch = tempfile.mkdtemp(prefix="spark-")
    spark = (configure(SparkSession.builder).master("local[2]").appName("killed-sink")
             .config("spark.ui.enabled", "false")
             .config("spark.local.dir", scratch)
             .config("spark.driver.extraJavaOptions", f'"-Djava.io.tmpdir={scratch}"')
             .getOrCreate())
    print("READY", flush=True)
    if not sys.stdin.readline():
        return  # the test ended without starting the stream
    q = (spark.readStream.format("rocketstore").option("path", src)
         .option("startingOffsets", "earliest").load().select("topic", "body")
         .writeStream.format("rocketstore").option("path", dst)
         .option("mapped_file_size_commit_log", segment)
         .option("checkpointLocation", ckpt).trigger(availableNow=True).start())
    print("STREAMING", flush=True)
    q.awaitTermination()
    print("COMMITTED", flush=True)  # reached only when the test is too late


if __name__ == "__main__":
    main()
