"""A Spark driver's commit to be killed with SIGKILL mid-append:
``spark_commit_child.py OPTIONS_JSON JOB_DIR FILES_JSON``.

Runs the batch write's commit (``_commit.append_staged``) on files staged by
the test, as the driver's commit would; prints ``APPENDING`` first. The test
kills it once the append has rolled a few CommitLog segments.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    from rocketstore.spark._commit import StagedFile, append_staged
    from rocketstore.spark._options import WriteOptions

    opts = WriteOptions.parse(json.loads(sys.argv[1]))
    files = [StagedFile(**f) for f in json.loads(sys.argv[3])]
    print("APPENDING", flush=True)
    n = append_staged(opts, sys.argv[2], files)
    print(f"APPENDED {n}", flush=True)


if __name__ == "__main__":
    main()
