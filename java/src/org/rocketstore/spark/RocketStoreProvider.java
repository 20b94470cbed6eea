package org.rocketstore.spark;

import java.util.Collections;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Spark format {@code rocketstore} on the JVM: batch and micro-batch streaming reads of
 * rocketstore stores through the Rust engine (JNI), handed to Spark as column batches, and
 * batch and streaming writes. The options, schema, partitioning and
 * pushdown are the Python source's (docs/spark.md); the Python source is registered as
 * {@code rocketstore_python} beside it.
 */
public class RocketStoreProvider implements TableProvider, DataSourceRegister {
  static final Logger LOG = LoggerFactory.getLogger("rocketstore");

  @Override
  public String shortName() {
    return "rocketstore";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    try {
      return Columns.schema(new ReadOpts(options, null).several());
    } catch (IllegalArgumentException e) {
      // Spark asks a streaming sink's table for a schema too: a sink's options are not a
      // read's, and its table's schema is not used.
      try {
        new WriteOpts(options.asCaseSensitiveMap(), true);
      } catch (IllegalArgumentException notASink) {
        throw e;
      }
      return Columns.schema(false);
    }
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    // A read's options and schema are checked here, when it is loaded; a write's (whose
    // options and columns are not a read's) when it is planned.
    ReadOpts opts = null;
    String[] columns = null;
    RuntimeException notARead = null;
    try {
      opts = new ReadOpts(props, null);
      columns = Columns.projection(schema, opts.several());
    } catch (IllegalArgumentException e) {
      notARead = e;
    }
    return new RocketStoreTable(props, schema, opts, columns, notARead);
  }

  /**
   * A store (or several) as a table that reads (in batches or streaming) and takes writes
   * (batch or streaming). Its read options are parsed when it is read (a write has options
   * of its own).
   */
  static final class RocketStoreTable implements SupportsRead, SupportsWrite {
    private final Map<String, String> props;
    private final StructType schema;
    private final ReadOpts opts;
    private final String[] columns;
    private final RuntimeException notARead;

    RocketStoreTable(Map<String, String> props, StructType schema, ReadOpts opts,
        String[] columns, RuntimeException notARead) {
      this.props = props;
      this.schema = schema;
      this.opts = opts;
      this.columns = columns;
      this.notARead = notARead;
    }

    @Override
    public String name() {
      String p = props.get("paths") != null ? props.get("paths") : props.get("path");
      return "rocketstore " + p;
    }

    @Override
    @SuppressWarnings("deprecation") // Spark 4 still asks a table for schema() first
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.unmodifiableSet(EnumSet.of(TableCapability.BATCH_READ,
          TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_WRITE,
          TableCapability.STREAMING_WRITE));
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      if (notARead != null) {
        throw notARead;
      }
      return new RocketStoreScan(props, opts, schema, columns);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return new RocketStoreWrite(info);
    }
  }
}
