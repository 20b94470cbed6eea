package org.rocketstore.spark;

import java.io.Serializable;
import java.sql.Timestamp;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import org.apache.spark.sql.sources.EqualNullSafe;
import org.apache.spark.sql.sources.EqualTo;
import org.apache.spark.sql.sources.Filter;
import org.apache.spark.sql.sources.GreaterThan;
import org.apache.spark.sql.sources.GreaterThanOrEqual;
import org.apache.spark.sql.sources.In;
import org.apache.spark.sql.sources.IsNotNull;
import org.apache.spark.sql.sources.LessThan;
import org.apache.spark.sql.sources.LessThanOrEqual;

/**
 * What a read keeps, as the store's indexes answer it: the rules of the Python source's
 * {@code _pushdown.translate} (sets null for "no condition"; bounds inclusive, null open).
 */
final class Pushed implements Serializable {
  private static final long serialVersionUID = 1L;

  Set<String> topics;
  Set<Integer> queueIds;
  Long[] queueOffset = {null, null};
  Long[] commitLogOffset = {null, null};
  /** Store time bounds in ms. */
  Long[] storeTime = {null, null};
  Set<String> tags;
  Set<String> msgIds;
  String[] keys;
  /** The filters Spark handed and the store answers (pushedFilters). */
  final List<Filter> handled = new ArrayList<>();

  boolean empty() {
    for (Set<?> s : Arrays.asList(topics, queueIds, tags, msgIds)) {
      if (s != null && s.isEmpty()) {
        return true;
      }
    }
    for (Long[] b : Arrays.asList(queueOffset, commitLogOffset, storeTime)) {
      if (b[0] != null && b[1] != null && b[0] > b[1]) {
        return true;
      }
    }
    return keys != null && keys.length == 0;
  }

  boolean narrows() {
    return topics != null || queueIds != null || msgIds != null || tags != null || keys != null
        || queueOffset[0] != null || queueOffset[1] != null || commitLogOffset[0] != null
        || commitLogOffset[1] != null || storeTime[0] != null || storeTime[1] != null;
  }

  /** Only a CommitLog offset range (a CommitLog range read answers it). */
  boolean commitLogOnly() {
    return topics == null && queueIds == null && msgIds == null && tags == null && keys == null
        && queueOffset[0] == null && queueOffset[1] == null && storeTime[0] == null
        && storeTime[1] == null;
  }

  String describe() {
    StringBuilder sb = new StringBuilder();
    add(sb, "topics", topics);
    add(sb, "queue_ids", queueIds);
    add(sb, "queue_offset", queueOffset[0] == null && queueOffset[1] == null ? null
        : Arrays.asList(queueOffset));
    add(sb, "commit_log_offset", commitLogOffset[0] == null && commitLogOffset[1] == null ? null
        : Arrays.asList(commitLogOffset));
    add(sb, "store_time", storeTime[0] == null && storeTime[1] == null ? null
        : Arrays.asList(storeTime));
    add(sb, "tags", tags);
    add(sb, "msg_ids", msgIds);
    add(sb, "keys", keys == null ? null : Arrays.asList(keys));
    return sb.length() == 0 ? "nothing" : sb.toString();
  }

  private static void add(StringBuilder sb, String name, Object v) {
    if (v != null) {
      sb.append(sb.length() == 0 ? "" : ", ").append(name).append('=').append(v);
    }
  }

  static Long[] and(Long[] a, Long[] b) {
    Long lo = a[0] == null ? b[0] : b[0] == null ? a[0] : Long.valueOf(Math.max(a[0], b[0]));
    Long hi = a[1] == null ? b[1] : b[1] == null ? a[1] : Long.valueOf(Math.min(a[1], b[1]));
    return new Long[] {lo, hi};
  }

  /**
   * Translates Spark's filters (a conjunction); returns the ones Spark must still evaluate.
   * Conditions the ranges answer only approximately (msg_id, commit_log_offset, IN on offsets)
   * are pushed and given back, so Spark keeps exactly the rows that meet them.
   */
  Filter[] translate(Filter[] filters) {
    List<Filter> left = new ArrayList<>();
    for (Filter f : filters) {
      String[] refs = f.references();
      if (refs.length != 1) {
        left.add(f);
        continue;
      }
      String col = refs[0];
      Columns.Column c = Columns.all().get(col);
      if (c == null) {
        left.add(f);
        continue;
      }
      if (f instanceof IsNotNull && c.neverNull) {
        handled.add(f);
        continue;
      }
      if (c.pushdown.equals("values")) {
        Set<Object> vals = values(f, c);
        if (vals == null) {
          left.add(f);
          continue;
        }
        intersect(col, vals);
        handled.add(f);
        if (col.equals("msg_id")) {
          left.add(f);
        }
      } else if (c.pushdown.equals("range")) {
        Long[] b = bound(f, c);
        if (b != null) {
          setRange(col, and(range(col), b));
          handled.add(f);
          if (col.equals("commit_log_offset")) {
            left.add(f);
          }
        } else if (f instanceof In && !c.arrowType.startsWith("timestamp[")) {
          List<Long> ints = new ArrayList<>();
          boolean allInts = true;
          for (Object v : ((In) f).values()) {
            if (v instanceof Integer || v instanceof Long) {
              ints.add(((Number) v).longValue());
            } else if (v != null) {
              allInts = false;
            }
          }
          if (ints.isEmpty() && allInts) {
            setRange(col, new Long[] {1L, 0L}); // IN (NULL): nothing
          } else if (allInts) {
            setRange(col, and(range(col), new Long[] {java.util.Collections.min(ints),
                java.util.Collections.max(ints)}));
          }
          left.add(f);
        } else {
          left.add(f);
        }
      } else {
        left.add(f);
      }
    }
    return left.toArray(new Filter[0]);
  }

  private Long[] range(String col) {
    switch (col) {
      case "queue_offset": return queueOffset;
      case "commit_log_offset": return commitLogOffset;
      default: return storeTime;
    }
  }

  private void setRange(String col, Long[] b) {
    switch (col) {
      case "queue_offset": queueOffset = b; break;
      case "commit_log_offset": commitLogOffset = b; break;
      default: storeTime = b;
    }
  }

  @SuppressWarnings("unchecked")
  private void intersect(String col, Set<Object> vals) {
    switch (col) {
      case "topic": topics = (Set<String>) (Set<?>) meet(topics, vals); break;
      case "queue_id": queueIds = (Set<Integer>) (Set<?>) meet(queueIds, vals); break;
      case "tags": tags = (Set<String>) (Set<?>) meet(tags, vals); break;
      case "msg_id": msgIds = (Set<String>) (Set<?>) meet(msgIds, vals); break;
      default: throw new IllegalStateException("no pushdown for " + col);
    }
  }

  private static Set<Object> meet(Set<?> prev, Set<Object> vals) {
    if (prev == null) {
      return vals;
    }
    Set<Object> out = new LinkedHashSet<>(prev);
    out.retainAll(vals);
    return out;
  }

  private static Set<Object> values(Filter f, Columns.Column c) {
    Object[] vals;
    if (f instanceof EqualTo) {
      vals = new Object[] {((EqualTo) f).value()};
    } else if (f instanceof EqualNullSafe) {
      Object v = ((EqualNullSafe) f).value();
      if (v == null) {
        return null; // <=> NULL is true for null rows
      }
      vals = new Object[] {v};
    } else if (f instanceof In) {
      vals = ((In) f).values();
    } else {
      return null;
    }
    Set<Object> out = new LinkedHashSet<>();
    for (Object v : vals) {
      if (v == null) {
        continue;
      }
      boolean ok = c.arrowType.equals("string") ? v instanceof String : v instanceof Integer;
      if (!ok) {
        return null;
      }
      out.add(v);
    }
    return out;
  }

  private static Long micros(Object v) {
    Instant i;
    if (v instanceof Timestamp) {
      i = ((Timestamp) v).toInstant();
    } else if (v instanceof Instant) {
      i = (Instant) v;
    } else if (v instanceof LocalDateTime) {
      i = ((LocalDateTime) v).toInstant(ZoneOffset.UTC);
    } else {
      return null;
    }
    return Math.addExact(Math.multiplyExact(i.getEpochSecond(), 1_000_000L), i.getNano() / 1000);
  }

  private static Long[] bound(Filter f, Columns.Column c) {
    Object v;
    if (f instanceof EqualTo) {
      v = ((EqualTo) f).value();
    } else if (f instanceof EqualNullSafe) {
      v = ((EqualNullSafe) f).value();
    } else if (f instanceof GreaterThan) {
      v = ((GreaterThan) f).value();
    } else if (f instanceof GreaterThanOrEqual) {
      v = ((GreaterThanOrEqual) f).value();
    } else if (f instanceof LessThan) {
      v = ((LessThan) f).value();
    } else if (f instanceof LessThanOrEqual) {
      v = ((LessThanOrEqual) f).value();
    } else {
      return null;
    }
    long ge, le, gt, lt;
    if (c.arrowType.startsWith("timestamp[")) {
      Long us = micros(v);
      if (us == null) {
        return null;
      }
      ge = Math.floorDiv(us + 999, 1000);
      le = Math.floorDiv(us, 1000);
      gt = Math.floorDiv(us, 1000) + 1;
      lt = Math.floorDiv(us + 999, 1000) - 1;
    } else {
      if (!(v instanceof Integer || v instanceof Long)) {
        return null;
      }
      long n = ((Number) v).longValue();
      ge = le = n;
      gt = n + 1;
      lt = n - 1;
    }
    if (f instanceof EqualTo || f instanceof EqualNullSafe) {
      return new Long[] {ge, le};
    } else if (f instanceof GreaterThan) {
      return new Long[] {gt, null};
    } else if (f instanceof GreaterThanOrEqual) {
      return new Long[] {ge, null};
    } else if (f instanceof LessThan) {
      return new Long[] {null, lt};
    }
    return new Long[] {null, le};
  }
}
