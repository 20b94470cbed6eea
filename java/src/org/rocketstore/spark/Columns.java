package org.rocketstore.spark;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The read schema, from the engine's column registry (rust/src/columnar/columns.rs, through
 * {@link NativeLib#columns()}): names, Arrow types, nulls and pushdown kinds are not written
 * here again; only the Spark type each Arrow type is exchanged as.
 */
final class Columns {
  /** One column of the registry. */
  static final class Column {
    final String name;
    final String arrowType;
    final boolean neverNull;
    /** "values", "range" or "-". */
    final String pushdown;
    final DataType sparkType;

    Column(String name, String arrowType, boolean neverNull, String pushdown) {
      this.name = name;
      this.arrowType = arrowType;
      this.neverNull = neverNull;
      this.pushdown = pushdown;
      DataType t = SPARK_TYPES.get(arrowType);
      if (t == null) {
        throw new IllegalStateException("no Spark type for the engine's Arrow type " + arrowType);
      }
      this.sparkType = t;
    }
  }

  /** The Spark type of each Arrow type of the read schema (as Python's SPARK_TYPES). */
  static final Map<String, DataType> SPARK_TYPES = new HashMap<>();

  static {
    SPARK_TYPES.put("string", DataTypes.StringType);
    SPARK_TYPES.put("int32", DataTypes.IntegerType);
    SPARK_TYPES.put("int64", DataTypes.LongType);
    SPARK_TYPES.put("binary", DataTypes.BinaryType);
    SPARK_TYPES.put("timestamp[us, tz=UTC]", DataTypes.TimestampType);
    SPARK_TYPES.put("list<element: string>", DataTypes.createArrayType(DataTypes.StringType));
    SPARK_TYPES.put("map<string, string>",
        DataTypes.createMapType(DataTypes.StringType, DataTypes.StringType));
  }

  private static volatile Map<String, Column> all;

  /** Every column, in the schema's order ({@code store} last). */
  static Map<String, Column> all() {
    Map<String, Column> m = all;
    if (m == null) {
      m = new LinkedHashMap<>();
      for (String line : NativeLib.columns().split("\n")) {
        String[] f = line.split("\t");
        m.put(f[0], new Column(f[0], f[1], f[2].equals("never"), f[3]));
      }
      all = m = Collections.unmodifiableMap(m);
    }
    return m;
  }

  /** The schema of a read (with {@code store} when several stores are read). */
  static StructType schema(boolean several) {
    List<StructField> fields = new ArrayList<>();
    for (Column c : all().values()) {
      if (several || !c.name.equals("store")) {
        fields.add(DataTypes.createStructField(c.name, c.sparkType, true));
      }
    }
    return DataTypes.createStructType(fields);
  }

  /** The columns a user-given schema asks for, checked against the registry. */
  static String[] projection(StructType schema, boolean several) {
    StructType full = schema(several);
    if (schema.equals(full)) {
      return null;
    }
    List<String> bad = new ArrayList<>();
    List<String> names = new ArrayList<>();
    for (StructField f : schema.fields()) {
      Column c = all().get(f.name());
      if (c == null) {
        bad.add(f.name() + " (no such column)");
      } else if (!c.sparkType.equals(f.dataType())) {
        bad.add(f.name() + " " + f.dataType().simpleString() + " (the column is "
            + c.sparkType.simpleString() + ")");
      } else if (names.contains(f.name())) {
        bad.add("a column named twice");
      }
      names.add(f.name());
    }
    if (!bad.isEmpty()) {
      StringBuilder cols = new StringBuilder();
      for (Column c : all().values()) {
        cols.append(cols.length() == 0 ? "" : ", ").append(c.name).append(' ')
            .append(c.sparkType.simpleString());
      }
      throw new IllegalArgumentException("the schema given to the rocketstore format does not fit: "
          + String.join("; ", bad) + ". Its columns (any subset, in any order): " + cols);
    }
    return names.toArray(new String[0]);
  }
}
