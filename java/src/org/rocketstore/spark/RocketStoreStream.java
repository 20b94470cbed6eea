package org.rocketstore.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.types.StructType;

/**
 * A micro-batch streaming read, with the Python source's rules
 * ({@code _StreamReader} in python/rocketstore/spark/_source.py): offsets are each queue's next
 * offset ({@link QueueOffsets}, the same JSON), a new query starts at {@code startingOffsets}
 * (default latest; {@code startingTimestamp} wins), {@code maxOffsetsPerTrigger} shares a
 * micro-batch's offsets fairly between queues, {@code Trigger.AvailableNow} reads up to the
 * ends it saw when it began, a queue that appears later is read from its first offset, and
 * offsets retention deleted before they were read fail the query unless
 * {@code failOnDataLoss=false}. Every micro-batch's partitions are queue ranges, read by the
 * tasks through the engine like a batch read's.
 *
 * <p>The driver keeps its stores open read-only between triggers and follows their writers
 * ({@link NativeLib#refresh}); {@link #stop()} closes them.
 */
final class RocketStoreStream implements MicroBatchStream, SupportsTriggerAvailableNow {
  private final ReadOpts opts;
  private final StructType schema;
  private final String[] columns;
  /** Open read-only stores by path (the driver's). */
  private final Map<String, Long> stores = new LinkedHashMap<>();
  /** Trigger.AvailableNow: the ends to stop at (null: none). */
  private Map<String, Long> target;
  private QueueOffsets initial;

  RocketStoreStream(ReadOpts opts, StructType schema, String[] columns) {
    this.opts = opts;
    this.schema = schema;
    this.columns = columns;
  }

  /** The driver's open store of {@code path}, refreshed when {@code refresh}. */
  private synchronized Planner planner(String path, boolean refresh) {
    Long h = stores.get(path);
    if (h == null) {
      h = NativeLib.open(path, opts.fieldKeys, opts.fieldValues);
      stores.put(path, h);
    } else if (refresh) {
      NativeLib.refresh(h);
    }
    return new Planner(opts, path, h, false);
  }

  private String key(String path, String topic, int q) {
    return QueueOffsets.key(path, topic, q, opts.several());
  }

  private Object[] unkey(String key) {
    return QueueOffsets.unkey(key, opts.paths[0], opts.several());
  }

  private QueueOffsets sorted(Map<String, Long> m) {
    return QueueOffsets.sorted(m, opts.paths[0], opts.several());
  }

  /** Every queue's end offset now. */
  private Map<String, Long> ends() {
    Map<String, Long> out = new LinkedHashMap<>();
    for (String path : opts.paths) {
      Planner p = planner(path, true);
      for (Object[] tq : p.queues()) {
        String t = (String) tq[0];
        int q = (Integer) tq[1];
        out.put(key(path, t, q), p.at(t, q, 1, 0));
      }
    }
    return out;
  }

  @Override
  public synchronized Offset initialOffset() {
    if (initial != null) {
      return initial;
    }
    Map<String, Long> out = new LinkedHashMap<>();
    for (String path : opts.paths) {
      Planner p = planner(path, true);
      for (Object[] tq : p.queues()) {
        String t = (String) tq[0];
        int q = (Integer) tq[1];
        out.put(key(path, t, q), p.startOf(t, q));
      }
    }
    initial = sorted(out);
    RocketStoreProvider.LOG.info("rocketstore streaming read of {} starts at {} ({})",
        String.join(", ", opts.paths), initial.json(), startReason());
    return initial;
  }

  private String startReason() {
    if (opts.startingTimestamp != null) {
      return "startingTimestamp=" + opts.startingTimestamp;
    }
    if (opts.startingGiven) {
      return "startingOffsets=" + (opts.starting != null ? opts.starting
          : new QueueOffsets(opts.startingMap).json());
    }
    return "the latest offsets, the default: only messages put from now on are read; "
        + "set startingOffsets=earliest to read what the store holds";
  }

  @Override
  public synchronized void prepareForTriggerAvailableNow() {
    target = ends();
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return opts.maxOffsetsPerTrigger != null ? ReadLimit.maxRows(opts.maxOffsetsPerTrigger)
        : ReadLimit.allAvailable();
  }

  /**
   * The offsets the stores hold now, every queue's end (the JSON of the offsets): Spark's
   * progress reports them as the source's {@code latestOffset}, beside the micro-batch's end
   * that {@code maxOffsetsPerTrigger} or {@code Trigger.AvailableNow} may hold back.
   */
  @Override
  public synchronized Offset reportLatestOffset() {
    return sorted(ends());
  }

  @Override
  public Offset latestOffset() {
    throw new UnsupportedOperationException(
        "the rocketstore stream is read with admission control: latestOffset(start, limit)");
  }

  @Override
  public synchronized Offset latestOffset(Offset startOffset, ReadLimit limit) {
    Map<String, Long> ends = ends();
    if (target != null) {
      Map<String, Long> capped = new LinkedHashMap<>();
      for (Map.Entry<String, Long> e : ends.entrySet()) {
        Long t = target.get(e.getKey());
        if (t != null) {
          capped.put(e.getKey(), Math.min(e.getValue(), t));
        }
      }
      ends = capped;
    }
    Map<String, Long> start = offsets(startOffset);
    Map<String, Long> merged = new LinkedHashMap<>(start);
    for (Map.Entry<String, Long> e : ends.entrySet()) {
      Long s = start.get(e.getKey());
      merged.put(e.getKey(), s != null ? Math.max(e.getValue(), s) : e.getValue());
    }
    if (limit instanceof ReadMaxRows) {
      merged = admit(start, merged, ((ReadMaxRows) limit).maxRows());
    }
    return sorted(merged);
  }

  private static Map<String, Long> offsets(Offset o) {
    if (o == null) {
      return new LinkedHashMap<>();
    }
    QueueOffsets q = o instanceof QueueOffsets ? (QueueOffsets) o : QueueOffsets.parse(o.json());
    return new LinkedHashMap<>(q.offsets());
  }

  /** At most {@code budget} new offsets in total, shared fairly between queues. */
  private Map<String, Long> admit(Map<String, Long> start, Map<String, Long> ends, long budget) {
    Map<String, Long> out = new LinkedHashMap<>();
    Map<String, Long> want = new LinkedHashMap<>();
    List<String> pending = new ArrayList<>();
    for (Map.Entry<String, Long> e : ends.entrySet()) {
      String k = e.getKey();
      long begin = start.containsKey(k) ? start.get(k) : beginOfNew(k);
      out.put(k, begin);
      want.put(k, Math.max(0, e.getValue() - begin));
      if (want.get(k) > 0) {
        pending.add(k);
      }
    }
    while (budget > 0 && !pending.isEmpty()) {
      long share = Math.max(1, budget / pending.size());
      List<String> next = new ArrayList<>();
      for (String k : pending) {
        long take = Math.min(Math.min(share, want.get(k)), budget);
        out.put(k, out.get(k) + take);
        want.put(k, want.get(k) - take);
        budget -= take;
        if (want.get(k) > 0) {
          next.add(k);
        }
        if (budget == 0) {
          break;
        }
      }
      pending = next;
    }
    return out;
  }

  /** Where a queue that appeared after the query started begins: its first offset. */
  private long beginOfNew(String key) {
    Object[] k = unkey(key);
    return planner((String) k[0], false).at((String) k[1], (Integer) k[2], 0, 0);
  }

  @Override
  public synchronized InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
    Map<String, Long> start = offsets(startOffset);
    List<Part> out = new ArrayList<>();
    for (String path : opts.paths) {
      planner(path, true);
    }
    for (Map.Entry<String, Long> e : offsets(endOffset).entrySet()) {
      Object[] k = unkey(e.getKey());
      String path = (String) k[0];
      String t = (String) k[1];
      int q = (Integer) k[2];
      long hi = e.getValue();
      long first = planner(path, false).at(t, q, 0, 0);
      Long lo = start.get(e.getKey());
      if (lo == null) {
        lo = first;
      }
      if (lo < first && hi > lo) {
        String msg = t + "/" + q + ": offsets [" + lo + ", " + Math.min(first, hi) + ") of "
            + path + " were deleted by retention before they were read";
        if (opts.failOnDataLoss) {
          throw new StoreException(msg + " (set failOnDataLoss=false to skip them)");
        }
        RocketStoreProvider.LOG.warn("rocketstore: {}; skipping them", msg);
        lo = Math.min(first, hi);
      }
      for (long a = lo; a < hi; a += opts.maxRecordsPerPartition) {
        out.add(new Part(path, opts.storeName(path))
            .queue(t, q, a, Math.min(a + opts.maxRecordsPerPartition, hi)));
      }
    }
    return out.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ColumnarReader.Factory(opts, schema, columns, true);
  }

  @Override
  public Offset deserializeOffset(String json) {
    return QueueOffsets.parse(json);
  }

  @Override
  public void commit(Offset end) {}

  @Override
  public synchronized void stop() {
    for (long h : stores.values()) {
      NativeLib.close(h);
    }
    stores.clear();
  }

  @Override
  public String toString() {
    return "rocketstore (JVM) stream " + String.join(",", opts.paths);
  }
}
