package org.rocketstore.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * The write options, as the Python sink parses them (python/rocketstore/spark/_options.py,
 * {@code WriteOptions}): same names, defaults and errors.
 */
final class WriteOpts implements Serializable {
  private static final long serialVersionUID = 1L;
  static final int MAX_JOB_TAG = 200;
  static final List<String> SPARK_OPTIONS =
      Arrays.asList("path", "paths", "checkpointLocation", "queryName");
  static final List<String> BATCH_OPTIONS = Arrays.asList("stagingDir", "jobTag");
  static final List<String> STREAM_OPTIONS = Arrays.asList("stagingDir", "sinkName");

  final String path;
  final String stagingDir;
  final String sinkName;
  final String jobTag;
  final String[] fieldKeys;
  final String[] fieldValues;

  WriteOpts(Map<String, String> options, boolean streaming) {
    Map<String, String> o = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
    o.putAll(options);
    List<String> own = streaming ? STREAM_OPTIONS : BATCH_OPTIONS;
    check(o, own, streaming ? "streaming write" : "batch write");
    String p = o.get("paths") != null ? o.get("paths") : o.get("path");
    if (p == null || p.trim().isEmpty() || p.contains(",")) {
      throw new IllegalArgumentException("writing with the rocketstore format needs option path "
          + "(exactly one store directory)");
    }
    path = p.trim();
    String s = o.get("stagingDir");
    stagingDir = s != null && !s.isEmpty() ? s : stripSlash(path) + ".spark-staging";
    String n = o.get("sinkName");
    sinkName = n != null && !n.isEmpty() ? n : "default";
    String t = o.get("jobTag");
    if (t != null && !(t.length() > 0 && t.length() <= MAX_JOB_TAG && printable(t)
        && t.trim().equals(t))) {
      throw new IllegalArgumentException("option jobTag='" + t + "': expected 1 to " + MAX_JOB_TAG
          + " printable characters, without leading or trailing spaces");
    }
    jobTag = t;
    List<String> fk = new ArrayList<>();
    List<String> fv = new ArrayList<>();
    for (Map.Entry<String, String> en : o.entrySet()) {
      if (ReadOpts.STORE_FIELDS.contains(en.getKey().toLowerCase())) {
        fk.add(en.getKey().toLowerCase());
        fv.add(en.getValue());
      }
    }
    fieldKeys = fk.toArray(new String[0]);
    fieldValues = fv.toArray(new String[0]);
  }

  private static String stripSlash(String p) {
    String s = p;
    while (s.length() > 1 && s.endsWith("/")) {
      s = s.substring(0, s.length() - 1);
    }
    return s;
  }

  private static boolean printable(String t) {
    for (int i = 0; i < t.length(); i++) {
      char c = t.charAt(i);
      if (Character.isISOControl(c)) {
        return false;
      }
    }
    return true;
  }

  private static void check(Map<String, String> o, List<String> own, String what) {
    List<String> unknown = new ArrayList<>();
    for (String k : o.keySet()) {
      boolean ok = ReadOpts.STORE_FIELDS.contains(k.toLowerCase());
      for (String v : SPARK_OPTIONS) {
        ok |= v.equalsIgnoreCase(k);
      }
      for (String v : own) {
        ok |= v.equalsIgnoreCase(k);
      }
      if (!ok) {
        unknown.add(ReadOpts.elsewhere(k));
      }
    }
    if (!unknown.isEmpty()) {
      List<String> valid = new ArrayList<>(SPARK_OPTIONS.subList(0, 2));
      valid.addAll(own);
      throw new IllegalArgumentException("unknown option" + (unknown.size() > 1 ? "s" : "")
          + " for a rocketstore " + what + ": " + String.join(", ", unknown)
          + ". Valid options (case-insensitive): " + String.join(", ", valid)
          + ", and the store fields " + String.join(", ", ReadOpts.STORE_FIELDS));
    }
  }
}
