import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.rocketstore.spark.NativeLib;
import org.rocketstore.spark.StoreException;

/**
 * Calls every JNI entry of the connector's native library with bad input: null, closed, made-up
 * and mistyped handles, arrays of the wrong length, strings that are not valid UTF-16 (so not
 * valid UTF-8 on the native side), byte encodings cut short or lying about their lengths, and
 * offsets, queue ids and times at the ends of their ranges. Each case must end in a Java
 * exception of the expected class (or, where any answer is valid, in a result or a refusal of
 * the library's own kinds), never in a crash of the JVM and never in a caught native panic
 * (except the self test's). Run by tests/spark/test_jvm_safety.py in a JVM of its own, so a
 * crash is an exit status, not a lost test session.
 *
 * <p>Arguments: a store path (topic "orders", queues 0 and 1), a path for a new writable store,
 * a path that is a plain file. Prints one line per case ("ok" or "FAIL") and exits 1 on any
 * failure.
 */
public final class JniGuardProbe {
  private static final String IAE = "java.lang.IllegalArgumentException";
  private static final String ISE = "java.lang.IllegalStateException";
  private static final String STORE = StoreException.class.getName();
  private static final String ANY = "any";
  private static final long[] FORGED = {0L, -1L, Long.MIN_VALUE, Long.MAX_VALUE, 1L,
      0x5253_0000_0001L + 1_000_000_000L};
  private static final long[] EXTREMES = {Long.MIN_VALUE, -1L, 0L, Long.MAX_VALUE};
  private static final int[] QUEUES = {Integer.MIN_VALUE, -1, 0, Integer.MAX_VALUE};
  private static final String BAD_UTF16 = "x\uD800y\uDFFF";

  private interface Call {
    Object run() throws Exception;
  }

  private static int failures;
  private static int cases;

  private JniGuardProbe() {}

  /** Runs one case: {@code want} is an exception class name, "ok" or {@link #ANY}. */
  private static void check(String name, String want, Call c) {
    cases++;
    String got;
    String msg = "";
    try {
      Object r = c.run();
      got = "ok";
      msg = String.valueOf(r instanceof long[] ? java.util.Arrays.toString((long[]) r)
          : r instanceof Object[] ? java.util.Arrays.toString((Object[]) r) : r);
    } catch (Throwable t) {
      got = t.getClass().getName();
      msg = String.valueOf(t.getMessage());
    }
    boolean panic = msg.contains("native panic");
    boolean pass;
    if (want.equals(ANY)) {
      pass = !panic && (got.equals("ok") || got.equals(IAE) || got.equals(ISE)
          || got.equals(STORE));
    } else {
      pass = got.equals(want) && (!panic || name.startsWith("selfTest"));
    }
    if (!pass) {
      failures++;
    }
    String shown = msg.length() > 160 ? msg.substring(0, 160) + "..." : msg;
    System.out.println((pass ? "ok   " : "FAIL ") + name + " -> " + got + ": " + shown);
  }

  private static String[] arr(String... s) {
    return s;
  }

  /** One row of the write encoding (rust/jni/src/write.rs). */
  private static byte[] row(String topic, byte[] body, Integer queue) {
    ByteBuffer b = ByteBuffer.allocate(64 + 4 * (topic == null ? 0 : topic.length()) + body.length);
    str(b, topic);
    b.putInt(body.length).put(body);
    b.put((byte) (queue == null ? 0 : 1)).putInt(queue == null ? 0 : queue);
    b.putInt(-1); // tags
    b.putInt(-1); // keys
    b.putInt(-1); // properties
    byte[] out = new byte[b.position()];
    b.flip().get(out);
    return out;
  }

  private static void str(ByteBuffer b, String s) {
    if (s == null) {
      b.putInt(-1);
      return;
    }
    byte[] u = s.getBytes(StandardCharsets.UTF_8);
    b.putInt(u.length).put(u);
  }

  private static byte[] cat(byte[]... parts) {
    int n = 0;
    for (byte[] p : parts) {
      n += p.length;
    }
    ByteBuffer b = ByteBuffer.allocate(n);
    for (byte[] p : parts) {
      b.put(p);
    }
    return b.array();
  }

  public static void main(String[] args) throws Exception {
    String path = args[0];
    String fresh = args[1];
    String plainFile = args[2];
    long base = NativeLib.openHandles();

    check("selfTest(1) panics", ISE, () -> {
      NativeLib.selfTest(1);
      return null;
    });
    check("selfTest(0)", "ok", () -> {
      NativeLib.selfTest(0);
      return null;
    });
    check("columns", "ok", () -> NativeLib.columns().split("\n").length);

    opens(path, plainFile);
    long s = NativeLib.open(path, null, null);
    long r = NativeLib.openReader(s, null, null, null, new long[] {0, Long.MAX_VALUE}, null, 0,
        Long.MIN_VALUE, Long.MAX_VALUE, null, 3, null, null);
    long[] first = NativeLib.nextBatch(r);
    long batch = first[0];
    long closedStore = NativeLib.open(path, null, null);
    NativeLib.close(closedStore);
    long closedReader = NativeLib.openReader(s, null, null, null, null, null, 0, 0, 0, null, 3,
        null, null);
    NativeLib.close(closedReader);

    List<Long> notStores = new ArrayList<>();
    for (long h : FORGED) {
      notStores.add(h);
    }
    notStores.add(closedStore);
    notStores.add(r);
    notStores.add(batch);
    for (long h : notStores) {
      storeCalls("0x" + Long.toHexString(h), h);
    }
    List<Long> notReaders = new ArrayList<>();
    for (long h : FORGED) {
      notReaders.add(h);
    }
    notReaders.add(closedReader);
    notReaders.add(s);
    notReaders.add(batch);
    for (long h : notReaders) {
      String n = "0x" + Long.toHexString(h);
      check("nextBatch " + n, ISE, () -> NativeLib.nextBatch(h));
      check("readStats " + n, ISE, () -> NativeLib.readStats(h));
    }
    for (long h : FORGED) {
      check("close " + h, "ok", () -> {
        NativeLib.close(h);
        return null;
      });
    }

    nulls(s);
    ranges(s);
    readers(s, path);
    writes(fresh, s);
    races(path);

    // Closing twice does nothing; everything this probe opened is gone.
    NativeLib.close(batch);
    NativeLib.close(batch);
    NativeLib.close(r);
    NativeLib.close(s);
    NativeLib.close(s);
    check("no handle left open", "ok", () -> {
      long n = NativeLib.openHandles();
      if (n != base) {
        throw new AssertionError(n + " handles open, " + base + " before");
      }
      return n;
    });
    System.out.println(cases + " cases, " + failures + " failures");
    System.exit(failures == 0 ? 0 : 1);
  }

  private static void opens(String path, String plainFile) {
    check("open null path", IAE, () -> NativeLib.open(null, null, null));
    check("open missing", STORE, () -> NativeLib.open(path + "/nope", null, null));
    check("open a plain file", STORE, () -> NativeLib.open(plainFile, null, null));
    check("open bad utf-16 path", STORE, () -> NativeLib.open(path + BAD_UTF16, null, null));
    check("open NUL in path", ANY, () -> NativeLib.open(path + "\u0000x", null, null));
    check("open names without values", IAE,
        () -> NativeLib.open(path, arr("max_index_num"), null));
    check("open values without names", IAE, () -> NativeLib.open(path, null, arr("1")));
    check("open null name", IAE, () -> NativeLib.open(path, arr((String) null), arr("1")));
    check("open null value", IAE, () -> NativeLib.open(path, arr("max_index_num"),
        arr((String) null)));
    check("open unknown field", IAE, () -> NativeLib.open(path, arr("nope"), arr("1")));
    check("open bad number", IAE, () -> NativeLib.open(path, arr("max_index_num"),
        arr("many")));
    check("open negative size", IAE, () -> NativeLib.open(path,
        arr("mapped_file_size_commit_log"), arr("-1")));
    check("open wrong segment size", STORE, () -> NativeLib.open(path,
        arr("mapped_file_size_commit_log"), arr("4096")));
    // Out of StoreConfig's ranges: refused before the store is opened (a
    // single short queue file would take any size).
    String[][] outOfRange = {{"mapped_file_size_commit_log", "0"},
        {"mapped_file_size_commit_log", "98"}, {"mapped_file_size_commit_log", "2147483648"},
        {"mapped_file_size_consume_queue", "0"},
        {"mapped_file_size_consume_queue", "2147483647"},
        {"mapped_file_size_consume_queue", String.valueOf(Long.MAX_VALUE)},
        {"mapped_file_size_consume_queue", "99999999999999999999"},
        {"max_hash_slot_num", "0"}, {"max_hash_slot_num", "-5"},
        {"max_index_num", "2147483648"}, {"max_index_num", "0"}};
    for (String[] kv : outOfRange) {
      check("open " + kv[0] + "=" + kv[1], IAE, () -> NativeLib.open(path, arr(kv[0]),
          arr(kv[1])));
    }
    check("open an IndexFile over 2 GiB", IAE, () -> NativeLib.open(path,
        arr("max_hash_slot_num", "max_index_num"), arr("2147483647", "2147483647")));
    check("open bad on_corruption", IAE, () -> NativeLib.open(path, arr("on_corruption"),
        arr("maybe")));
    check("openWriter null path", IAE, () -> NativeLib.openWriter(null, null, null));
    check("openWriter under a plain file", STORE,
        () -> NativeLib.openWriter(plainFile + "/store", null, null));
  }

  /** Every entry taking a store handle, with {@code h}, which is not an open store. */
  private static void storeCalls(String n, long h) {
    check("topics " + n, ISE, () -> NativeLib.topics(h));
    check("queueIds " + n, ISE, () -> NativeLib.queueIds(h, "orders"));
    check("queueAt " + n, ISE, () -> NativeLib.queueAt(h, "orders", 0, 1, 0));
    check("timesMonotone " + n, ISE, () -> NativeLib.timesMonotone(h, "orders", 0, 0, 0));
    check("commitLog " + n, ISE, () -> NativeLib.commitLog(h));
    check("keyHits " + n, ISE, () -> NativeLib.keyHits(h, "orders", "k1"));
    check("messageById " + n, ISE, () -> NativeLib.messageById(h, "00"));
    check("keyScan " + n, ISE, () -> NativeLib.keyScan(h, 0, 100, arr("orders"), arr("k"), 0));
    check("openReader " + n, ISE, () -> NativeLib.openReader(h, null, null, null, null, null, 0,
        0, 0, null, 3, null, null));
    check("appendRows " + n, ISE, () -> NativeLib.appendRows(h, new byte[0], 0, null, true));
    check("flush " + n, ISE, () -> NativeLib.flush(h));
    check("countTagged " + n, ISE, () -> NativeLib.countTagged(h, "p", "t", 0));
    check("refresh " + n, ISE, () -> NativeLib.refresh(h));
  }

  private static void nulls(long s) {
    check("isSystemTopic null", IAE, () -> NativeLib.isSystemTopic(null));
    check("isSystemTopic bad utf-16", "ok", () -> NativeLib.isSystemTopic(BAD_UTF16));
    check("queueIds null topic", IAE, () -> NativeLib.queueIds(s, null));
    check("queueAt null topic", IAE, () -> NativeLib.queueAt(s, null, 0, 0, 0));
    check("timesMonotone null topic", IAE, () -> NativeLib.timesMonotone(s, null, 0, 0, 0));
    check("keyHits null topic", IAE, () -> NativeLib.keyHits(s, null, "k"));
    check("keyHits null key", IAE, () -> NativeLib.keyHits(s, "orders", null));
    check("messageById null", IAE, () -> NativeLib.messageById(s, null));
    check("keyScan null topics", IAE, () -> NativeLib.keyScan(s, 0, 1, null, arr("k"), 0));
    check("keyScan null keys", IAE, () -> NativeLib.keyScan(s, 0, 1, arr("orders"), null, 0));
    check("keyScan null topic", IAE, () -> NativeLib.keyScan(s, 0, 1, arr((String) null),
        arr("k"), 0));
    check("keyScan null key", IAE, () -> NativeLib.keyScan(s, 0, 1, arr("orders"),
        arr((String) null), 0));
    for (String t : new String[] {"", BAD_UTF16, "../../x", "a/b", "\u0000", "nope",
        "x".repeat(100_000)}) {
      String n = t.length() > 20 ? "long topic" : "topic '" + t + "'";
      check("queueIds " + n, ANY, () -> NativeLib.queueIds(s, t));
      check("queueAt " + n, ANY, () -> NativeLib.queueAt(s, t, 0, 1, 0));
      check("timesMonotone " + n, ANY, () -> NativeLib.timesMonotone(s, t, 0, 0, 0));
      check("keyHits " + n, ANY, () -> NativeLib.keyHits(s, t, t));
      check("keyScan " + n, ANY, () -> NativeLib.keyScan(s, 0, Long.MAX_VALUE, arr(t), arr(t),
          0));
      check("isSystemTopic " + n, "ok", () -> NativeLib.isSystemTopic(t));
    }
    for (String id : new String[] {"", "zz", "0", BAD_UTF16, "7F000001000027DFFFFFFFFFFFFFFFFF",
        "7F000001000027DF8000000000000000", "7F000001000027DF0000000000000000",
        "0".repeat(64), "F".repeat(33), "x".repeat(100_000)}) {
      check("messageById '" + (id.length() > 40 ? "long" : id) + "'", ANY,
          () -> NativeLib.messageById(s, id));
    }
  }

  private static void ranges(long s) {
    check("queueAt what 99", IAE, () -> NativeLib.queueAt(s, "orders", 0, 99, 0));
    check("queueAt what -1", IAE, () -> NativeLib.queueAt(s, "orders", 0, -1, 0));
    for (int what = 0; what <= 4; what++) {
      for (int q : QUEUES) {
        for (long a : EXTREMES) {
          int w = what;
          check("queueAt what " + w + " q " + q + " arg " + a, ANY,
              () -> NativeLib.queueAt(s, "orders", q, w, a));
        }
      }
    }
    for (int q : QUEUES) {
      for (long a : EXTREMES) {
        for (long b : EXTREMES) {
          check("timesMonotone q " + q + " " + a + " " + b, ANY,
              () -> NativeLib.timesMonotone(s, "orders", q, a, b));
        }
      }
    }
    for (long a : EXTREMES) {
      for (long b : EXTREMES) {
        check("keyScan " + a + ".." + b, ANY,
            () -> NativeLib.keyScan(s, a, b, arr("orders"), arr("k1"), -1));
      }
    }
  }

  private static long drain(long r) {
    long rows = 0;
    for (long[] d = NativeLib.nextBatch(r); d != null; d = NativeLib.nextBatch(r)) {
      rows += d[1];
      NativeLib.close(d[0]);
    }
    return rows;
  }

  private static void readers(long s, String path) {
    String[] q1 = arr("orders");
    check("openReader topics/ids differ", IAE, () -> NativeLib.openReader(s, q1, new int[0],
        new long[] {0, 1}, null, null, 0, 0, 0, null, 3, null, null));
    check("openReader odd queue bounds", IAE, () -> NativeLib.openReader(s, q1, new int[] {0},
        new long[] {0}, null, null, 0, 0, 0, null, 3, null, null));
    check("openReader ids without topics", IAE, () -> NativeLib.openReader(s, null,
        new int[] {0}, new long[] {0, 1}, null, null, 0, 0, 0, null, 3, null, null));
    check("openReader odd CommitLog bounds", IAE, () -> NativeLib.openReader(s, null, null,
        null, new long[] {0, 1, 2}, null, 0, 0, 0, null, 3, null, null));
    check("openReader batch 0", IAE, () -> NativeLib.openReader(s, null, null, null, null, null,
        0, 0, 0, null, 0, null, null));
    check("openReader batch -1", IAE, () -> NativeLib.openReader(s, null, null, null, null,
        null, 0, 0, 0, null, -1, null, null));
    check("openReader unknown column", IAE, () -> NativeLib.openReader(s, null, null, null,
        null, null, 0, 0, 0, null, 3, null, arr("bodyy")));
    check("openReader null column", IAE, () -> NativeLib.openReader(s, null, null, null,
        null, null, 0, 0, 0, null, 3, null, arr((String) null)));
    check("openReader null topic", IAE, () -> NativeLib.openReader(s, null, null, null,
        null, arr((String) null), 0, 0, 0, null, 3, null, null));
    check("openReader null tag", IAE, () -> NativeLib.openReader(s, null, null, null,
        null, null, 0, 0, 0, arr((String) null), 3, null, null));
    check("openReader a column twice", IAE, () -> NativeLib.openReader(s, null, null, null,
        null, null, 0, 0, 0, null, 3, null, arr("body", "body")));
    check("openReader store column without a name", IAE, () -> NativeLib.openReader(s, null,
        null, null, null, null, 0, 0, 0, null, 3, null, arr("store")));
    check("openReader bad queue topic", ANY, () -> NativeLib.openReader(s, arr("../x"),
        new int[] {0}, new long[] {0, 10}, null, null, 0, 0, 0, null, 3, null, null));
    long[][] bounds = {{Long.MIN_VALUE, Long.MAX_VALUE}, {Long.MAX_VALUE, Long.MIN_VALUE},
        {-5, -1}, {Long.MAX_VALUE - 1, Long.MAX_VALUE}, {5, 2}, {0, Long.MAX_VALUE}};
    for (long[] b : bounds) {
      for (int q : QUEUES) {
        check("read queue " + q + " " + b[0] + ".." + b[1], ANY, () -> {
          long r = NativeLib.openReader(s, q1, new int[] {q}, b, null, null, 0, Long.MIN_VALUE,
              Long.MAX_VALUE, null, 7, null, null);
          try {
            return drain(r);
          } finally {
            NativeLib.close(r);
          }
        });
      }
      check("read CommitLog " + b[0] + ".." + b[1], ANY, () -> {
        long r = NativeLib.openReader(s, null, null, null, b, null, -1, Long.MIN_VALUE,
            Long.MAX_VALUE, null, 7, BAD_UTF16, arr("store", "body", "tags"));
        try {
          return drain(r);
        } finally {
          NativeLib.close(r);
        }
      });
    }
    check("read with times inverted and bad tags", ANY, () -> {
      long r = NativeLib.openReader(s, null, null, null, new long[] {0, Long.MAX_VALUE}, null,
          -1, Long.MAX_VALUE, Long.MIN_VALUE, arr(BAD_UTF16, ""), 7, null, null);
      try {
        return drain(r);
      } finally {
        NativeLib.close(r);
      }
    });
    check("read one huge batch", ANY, () -> {
      long r = NativeLib.openReader(s, null, null, null, new long[] {0, Long.MAX_VALUE}, null, 3,
          Long.MIN_VALUE, Long.MAX_VALUE, null, Integer.MAX_VALUE, null, arr("queue_offset"));
      try {
        return drain(r);
      } finally {
        NativeLib.close(r);
      }
    });
    check("read no columns", ANY, () -> {
      long r = NativeLib.openReader(s, null, null, null, new long[] {0, Long.MAX_VALUE}, null, 0,
          Long.MIN_VALUE, Long.MAX_VALUE, null, 5, null, new String[0]);
      try {
        return drain(r);
      } finally {
        NativeLib.close(r);
      }
    });
    check("a reader outlives its store's handle", "ok", () -> {
      long s2 = NativeLib.open(path, null, null);
      long r = NativeLib.openReader(s2, null, null, null, new long[] {0, Long.MAX_VALUE}, null,
          0, Long.MIN_VALUE, Long.MAX_VALUE, null, 5, null, null);
      NativeLib.close(s2);
      try {
        long n = drain(r);
        if (n == 0) {
          throw new AssertionError("no rows");
        }
        return n;
      } finally {
        NativeLib.close(r);
      }
    });
  }

  private static void writes(String fresh, long readOnly) {
    long w = NativeLib.openWriter(fresh, null, null);
    try {
      byte[] good = row("T", "x".getBytes(StandardCharsets.UTF_8), 0);
      check("appendRows to a read-only store", ANY,
          () -> NativeLib.appendRows(readOnly, good, 0, null, false));
      check("appendRows null rows", IAE, () -> NativeLib.appendRows(w, null, 0, null, true));
      check("appendRows empty", "ok", () -> NativeLib.appendRows(w, new byte[0], 0, null,
          false));
      check("appendRows cut short", IAE, () -> NativeLib.appendRows(w,
          java.util.Arrays.copyOf(good, good.length - 1), 0, null, true));
      for (int cut = 1; cut < good.length; cut += 3) {
        int c = cut;
        check("appendRows cut at " + c, IAE, () -> NativeLib.appendRows(w,
            java.util.Arrays.copyOf(good, c), 0, null, true));
      }
      byte[] lying = good.clone();
      ByteBuffer.wrap(lying).putInt(0, Integer.MAX_VALUE);
      check("appendRows length past the end", IAE,
          () -> NativeLib.appendRows(w, lying, 0, null, true));
      byte[] negative = good.clone();
      ByteBuffer.wrap(negative).putInt(0, -7);
      check("appendRows negative length", IAE,
          () -> NativeLib.appendRows(w, negative, 0, null, true));
      byte[] manyKeys = good.clone();
      ByteBuffer.wrap(manyKeys).putInt(manyKeys.length - 8, Integer.MAX_VALUE);
      check("appendRows key count past the end", IAE,
          () -> NativeLib.appendRows(w, manyKeys, 0, null, true));
      byte[] manyProps = good.clone();
      ByteBuffer.wrap(manyProps).putInt(manyProps.length - 4, Integer.MAX_VALUE);
      check("appendRows property count past the end", IAE,
          () -> NativeLib.appendRows(w, manyProps, 0, null, true));
      byte[] notUtf8 = good.clone();
      notUtf8[4] = (byte) 0xC3; // a lead byte followed by nothing it accepts
      check("appendRows topic not UTF-8", IAE, () -> NativeLib.appendRows(w,
          cat(notUtf8, new byte[0]), 0, null, true));
      check("appendRows firstRow -1", IAE, () -> NativeLib.appendRows(w, good, -1, null, true));
      check("appendRows firstRow max", ANY,
          () -> NativeLib.appendRows(w, good, Long.MAX_VALUE, null, true));
      check("appendRows odd extra", IAE,
          () -> NativeLib.appendRows(w, good, 0, arr("JOB"), true));
      check("appendRows null extra", IAE,
          () -> NativeLib.appendRows(w, good, 0, arr("JOB", null), true));
      for (Integer q : new Integer[] {-1, Integer.MIN_VALUE, Integer.MAX_VALUE, null}) {
        check("appendRows check queue " + q, ANY, () -> NativeLib.appendRows(w,
            row("T", new byte[1], q), 0, null, true));
      }
      for (String t : new String[] {"", "../x", "a/b", BAD_UTF16, "x".repeat(70_000), null}) {
        String n = t == null ? "null" : t.length() > 20 ? "long" : "'" + t + "'";
        check("appendRows check topic " + n, "ok", () -> {
          String[] o = NativeLib.appendRows(w, row(t, new byte[1], 0), 0, null, true);
          if ("-1".equals(o[1])) {
            throw new AssertionError("topic " + n + " not refused");
          }
          return o;
        });
      }
      check("appendRows good", "ok", () -> NativeLib.appendRows(w, cat(good, good), 0,
          arr("JOB", "j"), false));
      check("flush", "ok", () -> NativeLib.flush(w));
      check("flush a read-only store", ANY, () -> NativeLib.flush(readOnly));
      check("refresh a read-only store", "ok", () -> NativeLib.refresh(readOnly));
      check("refresh a writer", ANY, () -> NativeLib.refresh(w));
      check("countTagged null prop", IAE, () -> NativeLib.countTagged(w, null, "j", 0));
      check("countTagged null tag", IAE, () -> NativeLib.countTagged(w, "JOB", null, 0));
      for (long a : EXTREMES) {
        check("countTagged since " + a, ANY, () -> NativeLib.countTagged(w, "JOB", "j", a));
      }
      check("openWriter a second time", STORE, () -> NativeLib.openWriter(fresh, null, null));
    } finally {
      NativeLib.close(w);
    }
    check("appendRows after close", ISE, () -> NativeLib.appendRows(w, new byte[0], 0, null,
        true));
  }

  /** Readers closed by another thread while they read, and handles closed as they are used. */
  private static void races(String path) {
    check("close while reading", "ok", () -> {
      AtomicLong errors = new AtomicLong();
      for (int round = 0; round < 20; round++) {
        long s = NativeLib.open(path, null, null);
        long r = NativeLib.openReader(s, null, null, null, new long[] {0, Long.MAX_VALUE}, null,
            0, Long.MIN_VALUE, Long.MAX_VALUE, null, 2, null, null);
        AtomicBoolean go = new AtomicBoolean(true);
        Thread t = new Thread(() -> {
          try {
            while (go.get()) {
              long[] d = NativeLib.nextBatch(r);
              if (d == null) {
                break;
              }
              NativeLib.close(d[0]);
            }
          } catch (IllegalStateException e) {
            // the reader was closed under it: the expected refusal
          } catch (Throwable e) {
            errors.incrementAndGet();
          }
        });
        t.start();
        NativeLib.close(round % 2 == 0 ? r : s);
        NativeLib.close(round % 2 == 0 ? s : r);
        t.join();
      }
      if (errors.get() != 0) {
        throw new AssertionError(errors.get() + " unexpected errors");
      }
      return null;
    });
  }
}
