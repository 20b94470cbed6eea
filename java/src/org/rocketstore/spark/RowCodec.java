package org.rocketstore.spark;

import java.io.DataOutputStream;
import java.io.IOException;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.MapData;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BinaryType;
import org.apache.spark.sql.types.ByteType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.MapType;
import org.apache.spark.sql.types.ShortType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;

/**
 * A written row in the native library's row encoding (rust/jni/src/write.rs): topic, body,
 * queue id, tags, keys, properties; a column the DataFrame lacks is written as null, which the
 * append takes as absent (queue 0, no tags, keys or properties).
 */
final class RowCodec implements Serializable {
  private static final long serialVersionUID = 1L;

  private final int topic;
  private final int body;
  private final int queue;
  private final int tags;
  private final int keys;
  private final int props;
  private final DataType queueType;
  private final boolean bodyIsString;

  RowCodec(StructType schema) {
    checkSchema(schema);
    topic = index(schema, "topic", true);
    body = index(schema, "body", false);
    queue = index(schema, "queue_id", false);
    tags = index(schema, "tags", true);
    keys = index(schema, "keys", false);
    props = index(schema, "properties", false);
    bodyIsString = schema.fields()[body].dataType() instanceof StringType;
    queueType = queue < 0 ? null : schema.fields()[queue].dataType();
    if (queueType != null && !(queueType instanceof IntegerType || queueType instanceof LongType
        || queueType instanceof ShortType || queueType instanceof ByteType)) {
      throw bad("queue_id", "an integer");
    }
    DataType bt = schema.fields()[body].dataType();
    if (!(bt instanceof BinaryType || bt instanceof StringType)) {
      throw bad("body", "binary or string");
    }
    if (keys >= 0 && !(schema.fields()[keys].dataType() instanceof ArrayType
        && ((ArrayType) schema.fields()[keys].dataType()).elementType() instanceof StringType)) {
      throw bad("keys", "an array<string>");
    }
    if (props >= 0) {
      DataType d = schema.fields()[props].dataType();
      if (!(d instanceof MapType && ((MapType) d).keyType() instanceof StringType
          && ((MapType) d).valueType() instanceof StringType)) {
        throw bad("properties", "a map<string,string>");
      }
    }
  }

  /** A DataFrame to write needs topic and body columns (the Python sink's message). */
  static void checkSchema(StructType schema) {
    List<String> missing = new ArrayList<>();
    for (String c : new String[] {"topic", "body"}) {
      if (schema.getFieldIndex(c).isEmpty()) {
        missing.add(c);
      }
    }
    if (!missing.isEmpty()) {
      throw new IllegalArgumentException("writing to a rocketstore needs columns topic and body "
          + "(missing: " + String.join(", ", missing) + "); optional: queue_id, tags, keys, "
          + "properties");
    }
  }

  private static IllegalArgumentException bad(String name, String want) {
    return new IllegalArgumentException("column " + name + " must be " + want);
  }

  private static int index(StructType schema, String name, boolean string) {
    scala.Option<Object> i = schema.getFieldIndex(name);
    int at = i.isEmpty() ? -1 : (Integer) i.get();
    if (at >= 0 && string && !(schema.fields()[at].dataType() instanceof StringType)) {
      throw bad(name, "a string");
    }
    return at;
  }

  /** Writes {@code row} to {@code out}. */
  void encode(InternalRow row, DataOutputStream out) throws IOException {
    str(out, row.isNullAt(topic) ? null : row.getUTF8String(topic).getBytes());
    bytes(out, row.isNullAt(body) ? null
        : bodyIsString ? row.getUTF8String(body).getBytes() : row.getBinary(body));
    if (queue < 0 || row.isNullAt(queue)) {
      out.writeByte(0);
      out.writeInt(0);
    } else {
      long q = queueType instanceof LongType ? row.getLong(queue)
          : queueType instanceof ShortType ? row.getShort(queue)
          : queueType instanceof ByteType ? row.getByte(queue) : row.getInt(queue);
      if (q < Integer.MIN_VALUE || q > Integer.MAX_VALUE) {
        throw new IllegalArgumentException("queue_id " + q + " does not fit an int");
      }
      out.writeByte(1);
      out.writeInt((int) q);
    }
    str(out, tags < 0 || row.isNullAt(tags) ? null : row.getUTF8String(tags).getBytes());
    if (keys < 0 || row.isNullAt(keys)) {
      out.writeInt(-1);
    } else {
      ArrayData a = row.getArray(keys);
      out.writeInt(a.numElements());
      for (int i = 0; i < a.numElements(); i++) {
        str(out, a.isNullAt(i) ? null : a.getUTF8String(i).getBytes());
      }
    }
    if (props < 0 || row.isNullAt(props)) {
      out.writeInt(-1);
    } else {
      MapData m = row.getMap(props);
      ArrayData k = m.keyArray();
      ArrayData v = m.valueArray();
      out.writeInt(m.numElements());
      for (int i = 0; i < m.numElements(); i++) {
        str(out, k.getUTF8String(i).getBytes());
        str(out, v.isNullAt(i) ? null : v.getUTF8String(i).getBytes());
      }
    }
  }

  private static void str(DataOutputStream out, byte[] b) throws IOException {
    bytes(out, b);
  }

  private static void bytes(DataOutputStream out, byte[] b) throws IOException {
    if (b == null) {
      out.writeInt(-1);
    } else {
      out.writeInt(b.length);
      out.write(b);
    }
  }
}
