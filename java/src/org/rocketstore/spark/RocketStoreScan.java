package org.rocketstore.spark;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/**
 * Scan builder, scan and batch of one read: column pruning, filter pushdown, partitions; or
 * the micro-batch stream of a streaming read ({@link RocketStoreStream}).
 */
final class RocketStoreScan implements ScanBuilder, SupportsPushDownRequiredColumns,
    SupportsPushDownFilters, Scan, Batch {
  /** The options as given (parsed again once the kind of read is known). */
  private final Map<String, String> props;
  private final ReadOpts opts;
  private StructType schema;
  private String[] columns;
  private final Pushed pushed = new Pushed();

  /** {@code opts}: the options parsed for either kind of read. */
  RocketStoreScan(Map<String, String> props, ReadOpts opts, StructType schema,
      String[] columns) {
    this.props = props;
    this.opts = opts;
    this.schema = schema;
    this.columns = columns;
    pushed.keys = opts.keys;
  }

  @Override
  public void pruneColumns(StructType required) {
    if (required.fields().length == 0) {
      // count(*): one cheap column, never null.
      required = new StructType().add(schema.apply("queue_offset"));
    }
    schema = required;
    columns = Columns.projection(required, opts.several());
  }

  @Override
  public Filter[] pushFilters(Filter[] filters) {
    boolean scan = opts.topics == null && opts.queues == null && "earliest".equals(opts.starting)
        && "latest".equals(opts.ending);
    if (scan && opts.includeUncommitted) {
      return filters; // uncommitted records are only in the CommitLog: nothing pushes
    }
    return pushed.translate(filters);
  }

  @Override
  public Filter[] pushedFilters() {
    return pushed.handled.toArray(new Filter[0]);
  }

  @Override
  public Scan build() {
    return this;
  }

  @Override
  public StructType readSchema() {
    return schema;
  }

  @Override
  public String description() {
    return "rocketstore (JVM) " + String.join(",", opts.paths) + " pushed " + pushed.describe();
  }

  @Override
  public Batch toBatch() {
    new ReadOpts(props, ReadOpts.BATCH); // a streaming read's options are refused here
    return this;
  }

  @Override
  public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
    ReadOpts stream = new ReadOpts(props, ReadOpts.STREAM);
    if (!pushed.handled.isEmpty()) {
      throw new IllegalStateException("filters were pushed into a rocketstore streaming read");
    }
    return new RocketStoreStream(stream, schema, columns);
  }

  @Override
  public InputPartition[] planInputPartitions() {
    List<Part> out = new ArrayList<>();
    for (String path : opts.paths) {
      try (Planner p = new Planner(opts, path)) {
        out.addAll(p.partitions(pushed));
      }
    }
    RocketStoreProvider.LOG.info("rocketstore: the JVM connector reads {} in {} partitions",
        String.join(",", opts.paths), out.size());
    return out.toArray(new InputPartition[0]);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new ColumnarReader.Factory(opts, schema, columns);
  }
}
