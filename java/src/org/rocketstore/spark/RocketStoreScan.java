package org.rocketstore.spark;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownFilters;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.types.StructType;

/** Scan builder, scan and batch of one read: column pruning, filter pushdown, partitions. */
final class RocketStoreScan implements ScanBuilder, SupportsPushDownRequiredColumns,
    SupportsPushDownFilters, Scan, Batch {
  private final ReadOpts opts;
  private StructType schema;
  private String[] columns;
  private final Pushed pushed = new Pushed();

  RocketStoreScan(ReadOpts opts, StructType schema, String[] columns) {
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
    return this;
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
