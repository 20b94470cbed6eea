package org.rocketstore.spark;

import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.Decimal;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.types.TimestampType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarArray;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.sql.vectorized.ColumnarMap;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One column of a batch the engine decoded, read by Spark where its Arrow-format buffers lie in
 * native memory: values, offsets and validity bits are read with {@link Platform} at their
 * addresses, strings are handed out as {@link UTF8String}s over their bytes. Nothing is copied
 * and no Arrow Java object stands between Spark and the buffers (Arrow's vectors check bounds
 * and nulls on every value, which cost Spark a third of an all-columns read).
 *
 * <p>The buffers' layout is checked once when the batch is wrapped ({@link #batch}): every
 * length, every offset (non-decreasing, inside its data), so that no read of the column can
 * leave its buffers; a batch that fails a check is an error, never a read out of bounds. The
 * vectors are valid until the batch's native handle is closed (the reader's next batch or its
 * close), as Spark's contract for a reader's batch says.
 *
 * <p>Types: the read schema's (as {@link Columns}): string, binary, int, long, timestamp
 * (microseconds), array of strings and map of strings to strings.
 */
final class NativeColumnVector extends ColumnVector {
  private final int rows;
  private final long nulls;
  /** Validity bitmap address, 0 when the column has no null. */
  private final long validity;
  /** Offsets (int32, rows + 1) of a string, binary, array or map column; else 0. */
  private final long offsets;
  /** Values (fixed width) or bytes (string, binary); 0 for an array or a map. */
  private final long values;
  /** The element column of an array; the key then value columns of a map. */
  private final NativeColumnVector[] children;

  private NativeColumnVector(DataType type, int rows, long nulls, long validity, long offsets,
      long values, NativeColumnVector[] children) {
    super(type);
    this.rows = rows;
    this.nulls = nulls;
    this.validity = validity;
    this.offsets = offsets;
    this.values = values;
    this.children = children;
  }

  /**
   * The batch described by {@code d} (from {@code NativeLib.nextBatch}: {@code [handle, rows,
   * nodes, (length, nulls)*, buffers, (address, length)*]}, pre-order, every field's validity
   * first) as Spark column vectors of {@code schema}'s types.
   */
  static ColumnarBatch batch(StructType schema, long[] d) {
    Cursor c = new Cursor(d);
    int rows = c.count(d[1], "rows");
    StructField[] fields = schema.fields();
    ColumnVector[] cols = new ColumnVector[fields.length];
    for (int k = 0; k < fields.length; k++) {
      cols[k] = c.column(fields[k].dataType(), rows, fields[k].name());
    }
    c.end();
    return new ColumnarBatch(cols, rows);
  }

  /** Reads the nodes and buffers of a batch description in order, checking each. */
  private static final class Cursor {
    private final long[] d;
    private int node;
    private final int nodesEnd;
    private int buf;
    private final int bufsEnd;

    Cursor(long[] d) {
      this.d = d;
      if (d.length < 4) {
        throw bad("a description of " + d.length + " numbers");
      }
      node = 3;
      nodesEnd = 3 + 2 * count(d[2], "nodes");
      if (nodesEnd >= d.length) {
        throw bad("more nodes than numbers");
      }
      buf = nodesEnd + 1;
      bufsEnd = buf + 2 * count(d[nodesEnd], "buffers");
      if (bufsEnd != d.length) {
        throw bad("buffers that do not end the description");
      }
    }

    void end() {
      if (node != nodesEnd || buf != bufsEnd) {
        throw bad("nodes or buffers left over after the schema's columns");
      }
    }

    int count(long n, String what) {
      if (n < 0 || n > Integer.MAX_VALUE) {
        throw bad(what + " " + n);
      }
      return (int) n;
    }

    /** The next buffer's address, checked to hold at least {@code need} bytes. */
    private long buffer(long need, String what) {
      if (buf >= bufsEnd) {
        throw bad("no buffer left for " + what);
      }
      long addr = d[buf], len = d[buf + 1];
      buf += 2;
      if (len < need || (need > 0 && addr == 0)) {
        throw bad(what + ": " + len + " bytes where " + need + " are needed");
      }
      return addr;
    }

    NativeColumnVector column(DataType type, int rows, String name) {
      if (node >= nodesEnd) {
        throw bad("no node left for column " + name);
      }
      long length = d[node], nulls = d[node + 1];
      node += 2;
      if (length != rows || nulls < 0 || nulls > rows) {
        throw bad("column " + name + ": " + length + " rows, " + nulls + " nulls where the batch "
            + "has " + rows);
      }
      long validity = nulls > 0 ? buffer((rows + 7L) / 8, name + "'s validity") : skip();
      if (type instanceof IntegerType) {
        return new NativeColumnVector(type, rows, nulls, validity, 0, buffer(4L * rows, name),
            null);
      }
      if (type instanceof LongType || type instanceof TimestampType) {
        return new NativeColumnVector(type, rows, nulls, validity, 0, buffer(8L * rows, name),
            null);
      }
      if (type instanceof StringType || type instanceof BinaryType) {
        long off = buffer(4L * (rows + 1), name + "'s offsets");
        long end = checkOffsets(off, rows, name);
        return new NativeColumnVector(type, rows, nulls, validity, off,
            buffer(end, name + "'s bytes"), null);
      }
      if (type instanceof ArrayType) {
        long off = buffer(4L * (rows + 1), name + "'s offsets");
        int n = (int) checkOffsets(off, rows, name);
        NativeColumnVector element =
            column(((ArrayType) type).elementType(), n, name + "'s elements");
        return new NativeColumnVector(type, rows, nulls, validity, off, 0,
            new NativeColumnVector[] {element});
      }
      if (type instanceof MapType) {
        MapType m = (MapType) type;
        long off = buffer(4L * (rows + 1), name + "'s offsets");
        int n = (int) checkOffsets(off, rows, name);
        // The entries: a struct of n rows (validity only), then its key and value columns.
        if (node >= nodesEnd || d[node] != n || d[node + 1] != 0) {
          throw bad("column " + name + ": entries that are not " + n + " non-null rows");
        }
        node += 2;
        skip();
        NativeColumnVector keys = column(m.keyType(), n, name + "'s keys");
        NativeColumnVector vals = column(m.valueType(), n, name + "'s values");
        return new NativeColumnVector(type, rows, nulls, validity, off, 0,
            new NativeColumnVector[] {keys, vals});
      }
      throw new IllegalStateException("the rocketstore connector reads no " + type + " column");
    }

    /** A buffer the column does not read (a validity bitmap with no null in it). */
    private long skip() {
      if (buf >= bufsEnd) {
        throw bad("no buffer left");
      }
      buf += 2;
      return 0;
    }

    /** Checks {@code rows + 1} offsets (from 0, non-decreasing); returns the last. */
    private static long checkOffsets(long off, int rows, String name) {
      int prev = Platform.getInt(null, off);
      if (prev != 0) {
        throw bad("column " + name + ": first offset " + prev);
      }
      for (int r = 1; r <= rows; r++) {
        int o = Platform.getInt(null, off + 4L * r);
        if (o < prev) {
          throw bad("column " + name + ": offset " + o + " after " + prev);
        }
        prev = o;
      }
      return prev;
    }

    private static IllegalStateException bad(String what) {
      return new IllegalStateException("rocketstore: the engine handed over a malformed batch ("
          + what + ")");
    }
  }

  private int start(int rowId) {
    return Platform.getInt(null, offsets + 4L * rowId);
  }

  private int end(int rowId) {
    return Platform.getInt(null, offsets + 4L * rowId + 4);
  }

  @Override
  public void close() {
    // The buffers belong to the batch's native handle, which the reader closes.
  }

  @Override
  public boolean hasNull() {
    return nulls > 0;
  }

  @Override
  public int numNulls() {
    return (int) nulls;
  }

  @Override
  public boolean isNullAt(int rowId) {
    return validity != 0
        && ((Platform.getByte(null, validity + (rowId >> 3)) >> (rowId & 7)) & 1) == 0;
  }

  @Override
  public int getInt(int rowId) {
    return Platform.getInt(null, values + 4L * rowId);
  }

  @Override
  public long getLong(int rowId) {
    return Platform.getLong(null, values + 8L * rowId);
  }

  @Override
  public UTF8String getUTF8String(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    int s = start(rowId);
    return UTF8String.fromAddress(null, values + s, end(rowId) - s);
  }

  @Override
  public byte[] getBinary(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    int s = start(rowId);
    byte[] out = new byte[end(rowId) - s];
    Platform.copyMemory(null, values + s, out, Platform.BYTE_ARRAY_OFFSET, out.length);
    return out;
  }

  @Override
  public ColumnarArray getArray(int rowId) {
    if (isNullAt(rowId)) {
      return null;
    }
    int s = start(rowId);
    return new ColumnarArray(children[0], s, end(rowId) - s);
  }

  @Override
  public ColumnarMap getMap(int ordinal) {
    if (isNullAt(ordinal)) {
      return null;
    }
    int s = start(ordinal);
    return new ColumnarMap(children[0], children[1], s, end(ordinal) - s);
  }

  @Override
  public ColumnVector getChild(int ordinal) {
    return children[ordinal];
  }

  @Override
  public boolean getBoolean(int rowId) {
    throw unsupported();
  }

  @Override
  public byte getByte(int rowId) {
    throw unsupported();
  }

  @Override
  public short getShort(int rowId) {
    throw unsupported();
  }

  @Override
  public float getFloat(int rowId) {
    throw unsupported();
  }

  @Override
  public double getDouble(int rowId) {
    throw unsupported();
  }

  @Override
  public Decimal getDecimal(int rowId, int precision, int scale) {
    throw unsupported();
  }

  private UnsupportedOperationException unsupported() {
    return new UnsupportedOperationException("a rocketstore " + type + " column of " + rows
        + " rows");
  }
}
