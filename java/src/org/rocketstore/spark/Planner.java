package org.rocketstore.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The partitions of a batch read of one store: the Python source's rules
 * ({@code _BatchReader.partitions} and {@code _pushdown.plan}), asked of the engine through
 * {@link NativeLib}.
 */
final class Planner implements AutoCloseable {
  private static final Logger LOG = LoggerFactory.getLogger("rocketstore");
  private final ReadOpts o;
  private final String path;
  private final long store;
  private final boolean owned;
  private final long[] cl;

  Planner(ReadOpts o, String path) {
    this(o, path, NativeLib.open(path, o.fieldKeys, o.fieldValues), true);
  }

  /** A planner over an open store (closed with the planner when {@code owned}). */
  Planner(ReadOpts o, String path, long store, boolean owned) {
    this.o = o;
    this.path = path;
    this.store = store;
    this.owned = owned;
    this.cl = NativeLib.commitLog(store);
  }

  @Override
  public void close() {
    if (owned) {
      NativeLib.close(store);
    }
  }

  private boolean scan() {
    return o.topics == null && o.queues == null && "earliest".equals(o.starting)
        && "latest".equals(o.ending);
  }

  /** The (topic, queue) pairs to read, sorted. */
  List<Object[]> queues() {
    List<String> topics = new ArrayList<>();
    if (o.topics != null) {
      topics.addAll(new TreeSet<>(Arrays.asList(o.topics)));
    } else {
      for (String t : NativeLib.topics(store)) {
        if (o.includeSystem || !NativeLib.isSystemTopic(t)) {
          topics.add(t);
        }
      }
    }
    List<Object[]> out = new ArrayList<>();
    for (String t : topics) {
      for (long q : NativeLib.queueIds(store, t)) {
        boolean keep = o.queues == null;
        for (int i = 0; !keep && i < o.queues.length; i++) {
          keep = o.queues[i] == q;
        }
        if (keep) {
          out.add(new Object[] {t, (int) q});
        }
      }
    }
    return out;
  }

  /** {@link NativeLib#queueAt}: 0 first offset, 1 end offset, 2 CommitLog offset, 3 time. */
  long at(String t, int q, int what, long arg) {
    return NativeLib.queueAt(store, t, q, what, arg);
  }

  private long firstAtOrAfter(String t, int q, long lo, long hi, long ts) {
    while (lo < hi) {
      long mid = (lo + hi) >>> 1;
      if (at(t, q, 3, mid) >= ts) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    return lo;
  }

  private long resolve(String kw, Map<String, Long> m, String t, int q, long missing) {
    long lo = at(t, q, 0, 0);
    long hi = at(t, q, 1, 0);
    if (m != null) {
      long v = m.getOrDefault(t + "/" + q, missing);
      return v == -2 ? lo : v == -1 ? hi : Math.max(0, v);
    }
    return kw.equals("earliest") ? lo : hi;
  }

  /** Where reading a queue starts (startingTimestamp wins over startingOffsets). */
  long startOf(String t, int q) {
    if (o.startingTimestamp != null) {
      return firstAtOrAfter(t, q, at(t, q, 0, 0), at(t, q, 1, 0), o.startingTimestamp);
    }
    return resolve(o.starting, o.startingMap, t, q, -2);
  }

  private long endOf(String t, int q) {
    return resolve(o.ending, o.endingMap, t, q, -1);
  }

  List<Part> partitions(Pushed pushed) {
    List<Part> out = new ArrayList<>();
    String name = o.storeName(path);
    boolean scan = scan();
    if (pushed.narrows() && !(scan && o.includeUncommitted)) {
      return planned(pushed, scan);
    }
    if (scan) {
      long seg = Math.max(cl[2], 1);
      long size = o.maxBytesPerPartition != null ? o.maxBytesPerPartition : seg;
      long lo = Math.max(cl[0], 0), hi = cl[1];
      for (long s = lo - lo % seg; s < hi; s += seg) {
        for (long a = Math.max(s, lo); a < Math.min(s + seg, hi); a += size) {
          Part p = new Part(path, name).commitLog(a, Math.min(a + size, Math.min(s + seg, hi)));
          if (o.startingTimestamp != null) {
            p.minTime = o.startingTimestamp;
          }
          out.add(p);
        }
      }
      return out;
    }
    for (Object[] tq : queues()) {
      String t = (String) tq[0];
      int q = (Integer) tq[1];
      long lo = startOf(t, q), hi = endOf(t, q);
      for (long a = lo; a < hi; a += o.maxRecordsPerPartition) {
        out.add(new Part(path, name).queue(t, q, a, Math.min(a + o.maxRecordsPerPartition, hi)));
      }
    }
    return out;
  }

  private List<Part> planned(Pushed pushed, boolean scan) {
    String name = o.storeName(path);
    List<Part> out = new ArrayList<>();
    if (pushed.empty()) {
      return out;
    }
    Long minTime = scan ? o.startingTimestamp : null;
    if (scan && pushed.commitLogOnly()) {
      long a = Math.max(Math.max(cl[0], 0), pushed.commitLogOffset[0] == null ? 0
          : pushed.commitLogOffset[0]);
      long b = pushed.commitLogOffset[1] == null ? cl[1]
          : Math.min(cl[1], pushed.commitLogOffset[1] + 1);
      long seg = Math.max(cl[2], 1);
      for (long s = a; s < b; s = s - s % seg + seg) {
        Part p = new Part(path, name).commitLog(s, Math.min(s - s % seg + seg, b));
        if (minTime != null) {
          p.minTime = minTime;
        }
        out.add(p);
      }
      return out;
    }
    Map<String, long[]> qs = new TreeMap<>();
    Long qlo = pushed.queueOffset[0], qhi = pushed.queueOffset[1];
    for (Object[] tq : queues()) {
      String t = (String) tq[0];
      int q = (Integer) tq[1];
      if (pushed.topics != null && !pushed.topics.contains(t)
          || pushed.queueIds != null && !pushed.queueIds.contains(q)) {
        continue;
      }
      long a = scan ? at(t, q, 0, 0) : startOf(t, q);
      long b = scan ? at(t, q, 1, 0) : endOf(t, q);
      a = qlo == null ? a : Math.max(a, qlo);
      b = qhi == null ? b : Math.min(b, qhi + 1);
      if (a < b) {
        qs.put(t + "\u0000" + String.format("%011d", q + 0x40000000L), new long[] {q, a, b});
      }
    }
    Long[] time = Pushed.and(pushed.storeTime, new Long[] {minTime, null});
    if (pushed.keys != null || pushed.msgIds != null) {
      return hits(pushed, qs, time);
    }
    Long plo = pushed.commitLogOffset[0], phi = pushed.commitLogOffset[1];
    List<String> fallbacks = new ArrayList<>();
    for (Map.Entry<String, long[]> e : qs.entrySet()) {
      String t = e.getKey().substring(0, e.getKey().indexOf('\u0000'));
      int q = (int) e.getValue()[0];
      long a = e.getValue()[1], b = e.getValue()[2];
      if (plo != null) {
        a = firstByPhy(t, q, a, b, plo);
      }
      if (phi != null) {
        b = firstByPhy(t, q, a, b, phi + 1);
      }
      if ((time[0] != null || time[1] != null) && a < b) {
        if (NativeLib.isSystemTopic(t)) {
          fallbacks.add(t + "/" + q + ": a system topic: its time range is found by reading the queue");
        } else if (!monotone(t, q)) {
          fallbacks.add(t + "/" + q + ": store times decrease somewhere in the queue: its time "
              + "range is found by reading the queue");
        } else {
          if (time[0] != null) {
            a = firstByTime(t, q, a, b, time[0]);
          }
          if (time[1] != null && time[1] < Long.MAX_VALUE) {
            b = firstByTime(t, q, a, b, time[1] + 1);
          }
        }
      }
      for (long x = a; x < b; x += o.maxRecordsPerPartition) {
        out.add(timed(new Part(path, name).queue(t, q, x, Math.min(x + o.maxRecordsPerPartition, b)),
            time, pushed));
      }
    }
    for (String why : fallbacks) {
      LOG.warn("rocketstore {}: {}", path, why);
    }
    LOG.info("rocketstore {}: pushed down {}: {} partitions", path, pushed.describe(), out.size());
    return out;
  }

  private static Part timed(Part p, Long[] time, Pushed pushed) {
    p.minTime = time[0] == null ? Long.MIN_VALUE : time[0];
    p.maxTime = time[1] == null ? Long.MAX_VALUE : time[1];
    p.tags = pushed.tags == null ? null : new TreeSet<>(pushed.tags).toArray(new String[0]);
    return p;
  }

  private boolean monotone(String t, int q) {
    long[] r = NativeLib.timesMonotone(store, t, q, at(t, q, 0, 0), Long.MIN_VALUE);
    return r[0] != 0;
  }

  private long firstByPhy(String t, int q, long a, long b, long phy) {
    while (a < b) {
      long mid = (a + b) >>> 1;
      if (at(t, q, 2, mid) >= phy) {
        b = mid;
      } else {
        a = mid + 1;
      }
    }
    return a;
  }

  private long firstByTime(String t, int q, long lo, long hi, long ts) {
    if (lo >= hi) {
      return hi;
    }
    long guess = Math.min(Math.max(at(t, q, 4, ts), lo), hi - 1);
    long a, b;
    if (at(t, q, 3, guess) >= ts) {
      a = lo;
      b = guess;
    } else {
      a = guess + 1;
      b = hi;
    }
    while (a < b) {
      long mid = (a + b) >>> 1;
      long tm = at(t, q, 3, mid);
      if (tm < 0 || tm < ts) {
        a = mid + 1;
      } else {
        b = mid;
      }
    }
    return a;
  }

  /**
   * Adds (topic, queue id, offset) of the messages of {@code topics} whose keys hold one of
   * {@code keys}: by the index, and by a scan of the CommitLog ranges it does not cover (no
   * index, or records not indexed yet), as the Python source's planning does. Returns the
   * damaged records met.
   */
  private long keyRows(TreeSet<String> topics, String[] keys, List<Object[]> rows) {
    long lo = Math.max(cl[0], 0), hi = cl[1];
    if (lo >= hi || topics.isEmpty()) {
      return 0;
    }
    List<long[]> uncovered = new ArrayList<>();
    long damaged = 0;
    boolean usable = cl[3] >= 0;
    for (String t : usable ? topics : new TreeSet<String>()) {
      for (String k : keys) {
        long[] h = NativeLib.keyHits(store, t, k);
        if (h == null) {
          usable = false;
          break;
        }
        damaged += h[0];
        for (int i = 1; i + 1 < h.length; i += 2) {
          rows.add(new Object[] {t, (int) h[i], h[i + 1]});
        }
      }
    }
    if (!usable) {
      rows.clear();
      uncovered.add(new long[] {lo, hi});
      LOG.warn("rocketstore {}: the store has no usable index: keys are found by a CommitLog "
          + "scan", path);
    } else {
      if (cl[3] > lo) {
        uncovered.add(new long[] {lo, Math.min(cl[3], hi)});
      }
      if (cl[4] < hi) {
        uncovered.add(new long[] {Math.max(cl[4], lo), hi});
      }
    }
    int flags = (o.includeSystem ? 1 : 0) | (o.includeUncommitted ? 2 : 0);
    for (long[] r : uncovered) {
      String[] found = NativeLib.keyScan(store, r[0], r[1], topics.toArray(new String[0]), keys,
          flags);
      damaged += Long.parseLong(found[0]);
      for (int i = 1; i < found.length; i++) {
        String[] f = found[i].split("\t", 3);
        rows.add(new Object[] {f[2], Integer.parseInt(f[0]), Long.parseLong(f[1])});
      }
    }
    return damaged;
  }

  private List<Part> hits(Pushed pushed, Map<String, long[]> qs, Long[] time) {
    String name = o.storeName(path);
    TreeSet<String> found = new TreeSet<>();
    List<Object[]> rows = new ArrayList<>();
    long damaged = 0;
    if (pushed.msgIds != null) {
      for (String id : new TreeSet<>(pushed.msgIds)) {
        String[] m = NativeLib.messageById(store, id);
        if (m == null) {
          continue;
        }
        if (m.length == 0) {
          damaged++;
          continue;
        }
        rows.add(new Object[] {m[0], Integer.parseInt(m[1]), Long.parseLong(m[2])});
      }
    } else {
      TreeSet<String> topics = new TreeSet<>();
      for (String k : qs.keySet()) {
        topics.add(k.substring(0, k.indexOf('\u0000')));
      }
      damaged += keyRows(topics, pushed.keys, rows);
    }
    if (damaged > 0) {
      LOG.warn("rocketstore {}: {} damaged records skipped while planning", path, damaged);
    }
    List<Part> out = new ArrayList<>();
    Part cur = null;
    int n = 0;
    for (Object[] r : rows) {
      String t = (String) r[0];
      int q = (Integer) r[1];
      long off = (Long) r[2];
      long[] range = qs.get(t + "\u0000" + String.format("%011d", q + 0x40000000L));
      if (range == null || off < range[1] || off >= range[2] || !found.add(t + "/" + q + "/" + off)) {
        continue;
      }
      if (cur == null || n == o.maxRecordsPerPartition) {
        cur = timed(new Part(path, name), time, pushed);
        out.add(cur);
        n = 0;
      }
      cur.queue(t, q, off, off + 1);
      n++;
    }
    return out;
  }
}
