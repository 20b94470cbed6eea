package org.rocketstore.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Reads one partition: the engine decodes into Arrow arrays, and Spark reads each batch's
 * buffers where they lie through {@link NativeColumnVector}s: no row is copied. A batch's
 * native memory is released with the next batch, or by {@link #close()}, which a task
 * completion listener also calls: a killed task frees it too.
 */
final class ColumnarReader implements PartitionReader<ColumnarBatch> {
  /** Builds the readers in the tasks (serialized to executors: plain values). */
  static final class Factory implements PartitionReaderFactory {
    private static final long serialVersionUID = 1L;
    private final ReadOpts opts;
    private final StructType schema;
    private final String[] columns;
    private final boolean stream;

    Factory(ReadOpts opts, StructType schema, String[] columns) {
      this(opts, schema, columns, false);
    }

    /** {@code stream}: a micro-batch's reader (retention's losses fail it: failOnDataLoss). */
    Factory(ReadOpts opts, StructType schema, String[] columns, boolean stream) {
      this.opts = opts;
      this.schema = schema;
      this.columns = columns;
      this.stream = stream;
    }

    @Override
    public boolean supportColumnarReads(InputPartition p) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition p) {
      throw new UnsupportedOperationException("the rocketstore JVM connector reads columnar");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition p) {
      return new ColumnarReader(opts, schema, columns, (Part) p, stream);
    }
  }

  private final ReadOpts opts;
  private final Part part;
  private final boolean stream;
  private final StructType schema;
  private long store;
  private long reader;
  /** The native handle of the batch Spark holds (0: none). */
  private long batch;
  private ColumnarBatch current;
  private boolean closed;
  /**
   * Where the task's time goes (nanoseconds, for the metricsFile): from the reader's start, in
   * opening the store and the engine's reader, in {@link NativeLib#nextBatch} (the engine's
   * decoding and the native half of the hand-off, which the native side counts apart), in
   * wrapping the batches for Spark (the Java half of the hand-off); the rest of the task is
   * Spark's.
   */
  private final long born = System.nanoTime();
  private long openNs;
  private long nextNs;
  private long wrapNs;

  ColumnarReader(ReadOpts opts, StructType schema, String[] columns, Part part,
      boolean stream) {
    this.opts = opts;
    this.part = part;
    this.stream = stream;
    String[] cols = columns;
    String name = part.storeName;
    if (cols != null && java.util.Arrays.asList(cols).contains("store") && name == null) {
      name = part.path;
    }
    this.schema = schema;
    TaskContext ctx = TaskContext.get();
    if (ctx != null) {
      ctx.addTaskCompletionListener((org.apache.spark.util.TaskCompletionListener) c -> close());
    }
    try {
      store = NativeLib.open(part.path, opts.fieldKeys, opts.fieldValues);
      int n = part.qTopics.size();
      int[] ids = new int[n];
      long[] qb = new long[2 * n];
      for (int i = 0; i < n; i++) {
        ids[i] = part.qIds.get(i);
        qb[2 * i] = part.qBounds.get(2 * i);
        qb[2 * i + 1] = part.qBounds.get(2 * i + 1);
      }
      long[] cb = part.clBounds.stream().mapToLong(Long::longValue).toArray();
      int flags = (opts.includeSystem ? 1 : 0) | (opts.includeUncommitted ? 2 : 0);
      reader = NativeLib.openReader(store, part.qTopics.toArray(new String[0]), ids, qb, cb, null,
          flags, part.minTime, part.maxTime, part.tags, opts.batchSize, name, cols);
      openNs = System.nanoTime() - born;
    } catch (RuntimeException e) {
      close();
      throw e;
    }
  }

  @Override
  public boolean next() {
    release();
    long t0 = System.nanoTime();
    long[] d = NativeLib.nextBatch(reader);
    long t1 = System.nanoTime();
    nextNs += t1 - t0;
    if (d == null) {
      checkLoss();
      return false;
    }
    current = wrap(d);
    wrapNs += System.nanoTime() - t1;
    return true;
  }

  /**
   * A micro-batch's queue range whose messages retention deleted before they were read fails
   * the task unless failOnDataLoss=false (as the Python source's stream).
   */
  private void checkLoss() {
    if (!stream || !opts.failOnDataLoss || part.qTopics.size() != 1) {
      return;
    }
    long lost = NativeLib.readStats(reader)[4];
    if (lost > 0) {
      throw new StoreException(part.qTopics.get(0) + "/" + part.qIds.get(0) + ": " + lost
          + " messages in offsets [" + part.qBounds.get(0) + ", " + part.qBounds.get(1)
          + ") were deleted by retention before they were read (set failOnDataLoss=false to "
          + "skip them)");
    }
  }

  private ColumnarBatch wrap(long[] d) {
    batch = d[0];
    return NativeColumnVector.batch(schema, d);
  }

  @Override
  public ColumnarBatch get() {
    return current;
  }

  private void release() {
    current = null;
    if (batch != 0) {
      long b = batch;
      batch = 0;
      NativeLib.close(b);
    }
  }

  @Override
  public synchronized void close() {
    if (closed) {
      return;
    }
    closed = true;
    try {
      if (reader != 0) {
        report(NativeLib.readStats(reader));
      }
    } finally {
      try {
        release();
      } finally {
        if (reader != 0) {
          NativeLib.close(reader);
        }
        if (store != 0) {
          NativeLib.close(store);
        }
      }
    }
  }

  private void report(long[] s) {
    RocketStoreProvider.LOG.info("rocketstore read {}: decoded {}, rows {}, filtered {}, "
        + "damaged {}, lost {}", part, s[0], s[1], s[2], s[3], s[4]);
    if (s[3] > 0) {
      RocketStoreProvider.LOG.warn("rocketstore {}: {} damaged records skipped in {}", part.path,
          s[3], part);
    }
    if (s[4] > 0 && part.clBounds.isEmpty() && part.qTopics.size() == 1) {
      RocketStoreProvider.LOG.warn("rocketstore {}: {}/{}: {} messages in offsets [{}, {}) were "
          + "deleted by retention before they were read", part.path, part.qTopics.get(0),
          part.qIds.get(0), s[4], part.qBounds.get(0), part.qBounds.get(1));
    }
    if (opts.metricsFile != null) {
      String line = String.format("{\"partition\": \"%s\", \"decoded\": %d, \"rows\": %d, "
          + "\"filtered\": %d, \"damaged\": %d, \"lost\": %d, \"connector\": \"jvm\", "
          + "\"taskNs\": %d, \"openNs\": %d, \"nextNs\": %d, \"decodeNs\": %d, "
          + "\"exportNs\": %d, \"wrapNs\": %d}%n",
          part.toString().replace("\\", "\\\\").replace("\"", "\\\""), s[0], s[1], s[2], s[3],
          s[4], System.nanoTime() - born, openNs, nextNs, s[5], s[6], wrapNs);
      try {
        Files.write(Paths.get(opts.metricsFile), line.getBytes(StandardCharsets.UTF_8),
            StandardOpenOption.CREATE, StandardOpenOption.APPEND, StandardOpenOption.WRITE);
      } catch (IOException e) {
        RocketStoreProvider.LOG.warn("rocketstore: cannot append to metricsFile {}: {}",
            opts.metricsFile, e.toString());
      }
    }
  }
}
