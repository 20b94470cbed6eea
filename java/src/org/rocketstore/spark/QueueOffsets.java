package org.rocketstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.connector.read.streaming.Offset;

/**
 * A streaming read's position: the next offset of each queue, {@code {"topic/queue": offset}}
 * ({@code {"<path>|topic/queue": offset}} when several stores are read), in the canonical
 * order (path, topic, queue id). Its JSON is the Python source's, character for character
 * (Python's {@code json.dumps}: {@code ", "} and {@code ": "} separators, non-ASCII escaped),
 * so a checkpoint written by either connector resumes with the other.
 */
final class QueueOffsets extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();
  private final Map<String, Long> offsets;

  /** The offsets, in the order given (callers sort them: {@link #sorted}). */
  QueueOffsets(Map<String, Long> offsets) {
    this.offsets = Collections.unmodifiableMap(new LinkedHashMap<>(offsets));
  }

  Map<String, Long> offsets() {
    return offsets;
  }

  /** A checkpoint's offsets (either connector's JSON), in their order there. */
  static QueueOffsets parse(String json) {
    JsonNode n;
    try {
      n = JSON.readTree(json);
    } catch (Exception e) {
      throw new IllegalArgumentException("a rocketstore streaming offset is not JSON: " + json, e);
    }
    if (n == null || !n.isObject()) {
      throw new IllegalArgumentException("a rocketstore streaming offset is not a JSON object "
          + "of queue offsets: " + json);
    }
    Map<String, Long> m = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> e : n.properties()) {
      if (!e.getValue().isIntegralNumber()) {
        throw new IllegalArgumentException("a rocketstore streaming offset holds "
            + e.getKey() + ": " + e.getValue() + " (not an integer offset)");
      }
      m.put(e.getKey(), e.getValue().asLong());
    }
    return new QueueOffsets(m);
  }

  @Override
  public String json() {
    StringBuilder sb = new StringBuilder("{");
    for (Map.Entry<String, Long> e : offsets.entrySet()) {
      if (sb.length() > 1) {
        sb.append(", ");
      }
      quote(sb, e.getKey());
      sb.append(": ").append(e.getValue());
    }
    return sb.append('}').toString();
  }

  /** A JSON string as Python's json.dumps writes it (ensure_ascii). */
  static void quote(StringBuilder sb, String s) {
    sb.append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"':
          sb.append("\\\"");
          break;
        case '\\':
          sb.append("\\\\");
          break;
        case '\n':
          sb.append("\\n");
          break;
        case '\r':
          sb.append("\\r");
          break;
        case '\t':
          sb.append("\\t");
          break;
        case '\b':
          sb.append("\\b");
          break;
        case '\f':
          sb.append("\\f");
          break;
        default:
          if (c < 0x20 || c > 0x7e) {
            sb.append(String.format("\\u%04x", (int) c));
          } else {
            sb.append(c);
          }
      }
    }
    sb.append('"');
  }

  /** A queue's key: {@code topic/queue}, after {@code <path>|} when several stores are read. */
  static String key(String path, String topic, int queueId, boolean several) {
    String k = topic + "/" + queueId;
    return several ? path + "|" + k : k;
  }

  /** {path, topic, queue id} of a key ({@code path} is the store's when one is read). */
  static Object[] unkey(String key, String path, boolean several) {
    String k = key;
    if (several) {
      int bar = key.indexOf('|');
      path = bar < 0 ? key : key.substring(0, bar);
      k = bar < 0 ? "" : key.substring(bar + 1);
    }
    int slash = k.lastIndexOf('/');
    String q = slash < 0 ? "" : k.substring(slash + 1);
    String digits = q.startsWith("-") ? q.substring(1) : q;
    if (slash <= 0 || digits.isEmpty() || !digits.chars().allMatch(Character::isDigit)) {
      throw new IllegalArgumentException("offset key '" + key + "': expected \"topic/queue_id\"");
    }
    return new Object[] {path, k.substring(0, slash), Integer.parseInt(q)};
  }

  /** Code point order, as Python compares strings. */
  private static int compare(String a, String b) {
    int[] x = a.codePoints().toArray();
    int[] y = b.codePoints().toArray();
    for (int i = 0; i < Math.min(x.length, y.length); i++) {
      if (x[i] != y[i]) {
        return Integer.compare(x[i], y[i]);
      }
    }
    return Integer.compare(x.length, y.length);
  }

  /** The offsets in the canonical order: by path, topic, then queue id. */
  static QueueOffsets sorted(Map<String, Long> offsets, String path, boolean several) {
    List<String> keys = new ArrayList<>(offsets.keySet());
    keys.sort((a, b) -> {
      Object[] x = unkey(a, path, several);
      Object[] y = unkey(b, path, several);
      int c = compare((String) x[0], (String) y[0]);
      if (c == 0) {
        c = compare((String) x[1], (String) y[1]);
      }
      return c != 0 ? c : Integer.compare((Integer) x[2], (Integer) y[2]);
    });
    Map<String, Long> m = new LinkedHashMap<>();
    for (String k : keys) {
      m.put(k, offsets.get(k));
    }
    return new QueueOffsets(m);
  }
}
