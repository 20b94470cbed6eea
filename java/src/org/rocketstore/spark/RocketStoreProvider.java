package org.rocketstore.spark;

import java.util.Collections;
import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Spark format {@code rocketstore} on the JVM: batch reads of rocketstore stores through the
 * Rust engine (JNI), handed to Spark as column batches. The options, schema, partitioning and
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
    return Columns.schema(new ReadOpts(options).several());
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> props) {
    ReadOpts opts = new ReadOpts(props);
    return new RocketStoreTable(opts, schema, Columns.projection(schema, opts.several()));
  }

  /** A store (or several) as a table that reads in batches. */
  static final class RocketStoreTable implements SupportsRead {
    private final ReadOpts opts;
    private final StructType schema;
    private final String[] columns;

    RocketStoreTable(ReadOpts opts, StructType schema, String[] columns) {
      this.opts = opts;
      this.schema = schema;
      this.columns = columns;
    }

    @Override
    public String name() {
      return "rocketstore " + String.join(",", opts.paths);
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Collections.unmodifiableSet(EnumSet.of(TableCapability.BATCH_READ));
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new RocketStoreScan(opts, schema, columns);
    }
  }
}
