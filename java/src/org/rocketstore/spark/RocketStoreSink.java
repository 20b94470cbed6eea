package org.rocketstore.spark;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingDataWriterFactory;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;

/**
 * The streaming sink, with the Python sink's rules ({@code _StreamWriter} in
 * python/rocketstore/spark/_source.py): the tasks of micro-batch N stage their rows in
 * {@code <stagingDir>/stream-<sinkName>-N/} (made whole by the batch's first task, owned by
 * the query's driver), and the driver's commit appends them once per (sinkName, N)
 * ({@link SinkCommit}), then deletes that staging and the older batches'.
 */
final class RocketStoreSink implements StreamingWrite {
  private final WriteOpts opts;
  private final RowCodec codec;
  /** The driver's identity (made here, on the driver; the tasks record it). */
  private final String owner;

  RocketStoreSink(WriteOpts opts, RowCodec codec) {
    this.opts = opts;
    this.codec = codec;
    this.owner = Staging.owner();
    Staging.reclaim(opts.stagingDir);
  }

  @Override
  public StreamingDataWriterFactory createStreamingWriterFactory(PhysicalWriteInfo info) {
    return new Factory(opts.stagingDir, opts.sinkName, owner, codec);
  }

  @Override
  public void commit(long epochId, WriterCommitMessage[] messages) {
    SinkCommit.appendBatch(opts, RocketStoreWrite.staged(messages), epochId);
  }

  @Override
  public void abort(long epochId, WriterCommitMessage[] messages) {
    SinkCommit.removeStaging(opts, RocketStoreWrite.staged(messages), epochId);
  }

  @Override
  public String toString() {
    return "rocketstore (JVM) sink " + opts.sinkName + " into " + opts.path;
  }

  /** Builds the tasks' writers (serialized to executors: plain values). */
  static final class Factory implements StreamingDataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final String root;
    private final String sinkName;
    private final String owner;
    private final RowCodec codec;

    Factory(String root, String sinkName, String owner, RowCodec codec) {
      this.root = root;
      this.sinkName = sinkName;
      this.owner = owner;
      this.codec = codec;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId, long epochId) {
      String dir = Staging.batchDirOfStream(root, sinkName, epochId, owner);
      return new RocketStoreWrite.TaskWriter(codec, dir, partitionId);
    }
  }
}
