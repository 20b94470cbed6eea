package org.rocketstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The read options (batch or streaming), as the Python source parses them
 * (python/rocketstore/spark/_options.py): same names, defaults and errors.
 */
final class ReadOpts implements Serializable {
  private static final long serialVersionUID = 1L;
  static final int DEFAULT_MAX_RECORDS_PER_PARTITION = 2_000_000;
  static final int DEFAULT_BATCH_SIZE = 65_536;
  /** What Spark itself hands a data source (a streaming query's checkpoint and name too). */
  static final List<String> SPARK_OPTIONS =
      Arrays.asList("path", "paths", "checkpointLocation", "queryName");
  static final List<String> READ_OPTIONS = Arrays.asList("topic", "queues", "startingOffsets",
      "endingOffsets", "startingTimestamp", "includeSystemTopics", "includeUncommitted",
      "maxRecordsPerPartition", "maxBytesPerPartition", "batchSize", "key", "metricsFile");
  /** A streaming read's options: the batch read's but endingOffsets and key, and two more. */
  static final List<String> STREAM_OPTIONS = Arrays.asList("topic", "queues",
      "startingOffsets", "startingTimestamp", "includeSystemTopics", "includeUncommitted",
      "maxRecordsPerPartition", "maxBytesPerPartition", "batchSize", "metricsFile",
      "maxOffsetsPerTrigger", "failOnDataLoss");
  static final String BATCH = "batch read";
  static final String STREAM = "streaming read";
  /** StoreConfig fields the engine's read-only open takes (rust/jni/src/store.rs). */
  static final List<String> STORE_FIELDS = Arrays.asList("mapped_file_size_commit_log",
      "mapped_file_size_consume_queue", "commit_log_dir", "check_crc_on_recover", "on_corruption",
      "message_index_enable", "max_hash_slot_num", "max_index_num");

  final String[] paths;
  final String[] topics;
  final int[] queues;
  /** "earliest", "latest", or null with startingMap. */
  final String starting;
  final Map<String, Long> startingMap;
  final String ending;
  final Map<String, Long> endingMap;
  final Long startingTimestamp;
  final boolean includeSystem;
  final boolean includeUncommitted;
  final int maxRecordsPerPartition;
  final Long maxBytesPerPartition;
  final int batchSize;
  final String[] keys;
  final String metricsFile;
  final String[] fieldKeys;
  final String[] fieldValues;
  /** Streaming: at most this many new offsets per micro-batch (null: all available). */
  final Long maxOffsetsPerTrigger;
  /** Streaming: fail when retention deleted offsets before they were read. */
  final boolean failOnDataLoss;
  /** True when startingOffsets was given (else the default: latest for a stream). */
  final boolean startingGiven;

  /** A batch read's options. */
  ReadOpts(Map<String, String> options) {
    this(options, BATCH);
  }

  /**
   * The options of a {@link #BATCH} or {@link #STREAM} read ({@code kind} null: not known yet,
   * the options of either pass, as for the schema).
   */
  ReadOpts(Map<String, String> options, String kind) {
    Map<String, String> o = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    o.putAll(options);
    check(o, kind);
    String[] p = list(o.get("paths"));
    if (p == null) {
      p = list(o.get("path"));
    }
    if (p == null) {
      throw new IllegalArgumentException("the rocketstore format needs option path (a store "
          + "directory, or a comma-separated list / option paths for several stores)");
    }
    paths = p;
    topics = list(o.get("topic"));
    String[] q = list(o.get("queues"));
    if (q != null) {
      queues = new int[q.length];
      for (int i = 0; i < q.length; i++) {
        try {
          queues[i] = Integer.parseInt(q[i]);
        } catch (NumberFormatException e) {
          throw new IllegalArgumentException("option queues=" + repr(o.get("queues"))
              + ": expected a comma-separated list of queue ids");
        }
      }
    } else {
      queues = null;
    }
    startingGiven = o.get("startingOffsets") != null;
    Object[] s = offsets(o.get("startingOffsets"), "startingOffsets",
        STREAM.equals(kind) ? "latest" : "earliest");
    starting = (String) s[0];
    startingMap = castMap(s[1]);
    Object[] e = offsets(o.get("endingOffsets"), "endingOffsets", "latest");
    ending = (String) e[0];
    endingMap = castMap(e[1]);
    Long ts = longOpt(o, "startingTimestamp");
    startingTimestamp = ts;
    includeSystem = bool(o, "includeSystemTopics");
    includeUncommitted = bool(o, "includeUncommitted");
    Long b = longOpt(o, "batchSize");
    Long per = longOpt(o, "maxRecordsPerPartition");
    maxBytesPerPartition = longOpt(o, "maxBytesPerPartition");
    positive("batchSize", b == null || b == 0 ? null : b);
    positive("maxRecordsPerPartition", per);
    positive("maxBytesPerPartition", maxBytesPerPartition);
    maxOffsetsPerTrigger = longOpt(o, "maxOffsetsPerTrigger");
    positive("maxOffsetsPerTrigger", maxOffsetsPerTrigger);
    failOnDataLoss = !o.containsKey("failOnDataLoss") || bool(o, "failOnDataLoss");
    // 0 means the default, as for the Python source.
    batchSize = b == null || b == 0 ? DEFAULT_BATCH_SIZE : (int) Math.min(b, Integer.MAX_VALUE);
    maxRecordsPerPartition = per == null ? DEFAULT_MAX_RECORDS_PER_PARTITION
        : (int) Math.min(per, Integer.MAX_VALUE);
    if (o.containsKey("key")) {
      keys = list(o.get("key"));
      if (keys == null) {
        throw new IllegalArgumentException("option key: expected a comma-separated list of keys");
      }
    } else {
      keys = null;
    }
    String m = o.get("metricsFile");
    metricsFile = m == null || m.isEmpty() ? null : m;
    List<String> fk = new ArrayList<>();
    List<String> fv = new ArrayList<>();
    for (Map.Entry<String, String> en : o.entrySet()) {
      if (STORE_FIELDS.contains(en.getKey().toLowerCase())) {
        fk.add(en.getKey().toLowerCase());
        fv.add(en.getValue());
      }
    }
    fieldKeys = fk.toArray(new String[0]);
    fieldValues = fv.toArray(new String[0]);
  }

  boolean several() {
    return paths.length > 1;
  }

  String storeName(String path) {
    return several() ? path : null;
  }

  private static List<String> own(String kind) {
    if (kind == null) {
      List<String> both = new ArrayList<>(READ_OPTIONS);
      for (String x : STREAM_OPTIONS) {
        if (!both.contains(x)) {
          both.add(x);
        }
      }
      return both;
    }
    return BATCH.equals(kind) ? READ_OPTIONS : STREAM_OPTIONS;
  }

  /** An unknown name, with the use it belongs to (Spark lower-cases names: its own spelling). */
  static String elsewhere(String k) {
    List<String> uses = new ArrayList<>();
    String name = k;
    String[][] kinds = {{BATCH}, {STREAM}, {"batch write", "stagingDir", "jobTag"},
        {"streaming write", "stagingDir", "sinkName"}};
    for (String[] kind : kinds) {
      List<String> names = kind.length > 1 ? Arrays.asList(kind).subList(1, kind.length)
          : own(kind[0]);
      for (String n : names) {
        if (n.equalsIgnoreCase(k)) {
          uses.add(kind[0]);
          name = n;
        }
      }
    }
    return uses.isEmpty() ? k : name + " (an option of a " + String.join(" or ", uses) + ")";
  }

  private static void check(Map<String, String> o, String kind) {
    List<String> own = own(kind);
    List<String> unknown = new ArrayList<>();
    for (String k : o.keySet()) {
      boolean ok = STORE_FIELDS.contains(k.toLowerCase());
      for (String v : SPARK_OPTIONS) {
        ok |= v.equalsIgnoreCase(k);
      }
      for (String v : own) {
        ok |= v.equalsIgnoreCase(k);
      }
      if (!ok) {
        unknown.add(elsewhere(k));
      }
    }
    if (!unknown.isEmpty()) {
      List<String> valid = new ArrayList<>(SPARK_OPTIONS.subList(0, 2));
      valid.addAll(own);
      throw new IllegalArgumentException("unknown option" + (unknown.size() > 1 ? "s" : "")
          + " for a rocketstore " + (kind == null ? BATCH + " or " + STREAM : kind) + ": "
          + String.join(", ", unknown) + ". Valid options (case-insensitive): "
          + String.join(", ", valid) + ", and the store fields " + String.join(", ", STORE_FIELDS));
    }
  }

  private static String repr(String v) {
    return "'" + v + "'";
  }

  private static void positive(String name, Long v) {
    if (v != null && v <= 0) {
      throw new IllegalArgumentException("option " + name + " must be > 0, got " + v);
    }
  }

  private static boolean bool(Map<String, String> o, String name) {
    String v = o.get(name);
    if (v == null) {
      return false;
    }
    String t = v.trim().toLowerCase();
    if (!t.equals("true") && !t.equals("false")) {
      throw new IllegalArgumentException("option " + name + "=" + repr(v)
          + ": expected true or false");
    }
    return t.equals("true");
  }

  private static Long longOpt(Map<String, String> o, String name) {
    String v = o.get(name);
    if (v == null || v.trim().isEmpty()) {
      return null;
    }
    try {
      return Long.parseLong(v.trim());
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException("option " + name + "=" + repr(v)
          + ": expected an integer");
    }
  }

  @SuppressWarnings("unchecked")
  private static Map<String, Long> castMap(Object o) {
    return (Map<String, Long>) o;
  }

  static String[] list(String v) {
    if (v == null) {
      return null;
    }
    if (v.trim().startsWith("[")) { // load([p1, p2]) hands the paths as a JSON array
      try {
        JsonNode n = new ObjectMapper().readTree(v);
        if (n.isArray()) {
          List<String> out = new ArrayList<>();
          for (JsonNode x : n) {
            if (x.isTextual() && !x.asText().trim().isEmpty()) {
              out.add(x.asText());
            }
          }
          return out.isEmpty() ? null : out.toArray(new String[0]);
        }
      } catch (Exception e) {
        // not JSON: a comma list
      }
    }
    List<String> out = new ArrayList<>();
    for (String s : v.split(",")) {
      if (!s.trim().isEmpty()) {
        out.add(s.trim());
      }
    }
    return out.isEmpty() ? null : out.toArray(new String[0]);
  }

  /** [keyword or null, map or null]. */
  private static Object[] offsets(String text, String name, String dflt) {
    if (text == null || text.trim().isEmpty()) {
      return new Object[] {dflt, null};
    }
    String t = text.trim();
    if (t.equalsIgnoreCase("earliest") || t.equalsIgnoreCase("latest")) {
      return new Object[] {t.toLowerCase(), null};
    }
    JsonNode n;
    try {
      n = new ObjectMapper().readTree(t);
    } catch (Exception e) {
      throw new IllegalArgumentException("option " + name + "=" + repr(text)
          + ": expected earliest, latest or JSON {\"topic/queue\": offset} (" + e.getMessage()
          + ")");
    }
    if (n == null || !n.isObject()) {
      throw new IllegalArgumentException("option " + name + "=" + repr(text)
          + ": expected a JSON object of integer offsets");
    }
    Map<String, Long> m = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> en : n.properties()) {
      if (!en.getValue().isIntegralNumber()) {
        throw new IllegalArgumentException("option " + name + "=" + repr(text)
            + ": expected a JSON object of integer offsets");
      }
      int slash = en.getKey().lastIndexOf('/');
      if (slash <= 0 || !en.getKey().substring(slash + 1).matches("-?\\d+")) {
        throw new IllegalArgumentException("offset key '" + en.getKey()
            + "': expected \"topic/queue_id\"");
      }
      m.put(en.getKey(), en.getValue().asLong());
    }
    return new Object[] {null, m};
  }
}
