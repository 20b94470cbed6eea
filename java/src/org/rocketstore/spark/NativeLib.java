package org.rocketstore.spark;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;

/**
 * The engine's JNI entry points (rust/jni). The native library ships inside the jar
 * (native/linux-x86_64/librocketstore_jni.so); it is copied once to a temporary file named by
 * its SHA-256 (a file of that name holds those bytes, so it is reused, never overwritten while
 * mapped) and loaded once per JVM: the system property {@value #LOADED} records where, and a
 * second class loader holding this class refuses to load it again (the JVM would not bind its
 * methods) with a message saying so.
 */
public final class NativeLib {
  /** System property naming the library file this JVM loaded. */
  public static final String LOADED = "rocketstore.native.loaded";
  /** Resource path of the library inside the jar. */
  public static final String RESOURCE = "/native/linux-x86_64/librocketstore_jni.so";

  static {
    load();
  }

  private NativeLib() {}

  private static synchronized void load() {
    String override = System.getProperty("rocketstore.native.path");
    synchronized (System.class) {
      String done = System.getProperty(LOADED);
      if (done != null) {
        throw new IllegalStateException(
            "the rocketstore native library is already loaded in this JVM by another class loader ("
                + done + "): put the rocketstore jar on one class path only");
      }
      try {
        Path file = override != null ? Paths.get(override) : extract();
        System.load(file.toAbsolutePath().toString());
        System.setProperty(LOADED, file.toAbsolutePath().toString());
      } catch (IOException e) {
        throw new IllegalStateException("cannot extract the rocketstore native library: " + e, e);
      }
    }
  }

  private static Path extract() throws IOException {
    byte[] lib;
    try (InputStream in = NativeLib.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IOException(RESOURCE + " is not in the jar (a platform the jar was not built for: "
            + System.getProperty("os.name") + "/" + System.getProperty("os.arch") + ")");
      }
      lib = in.readAllBytes();
    }
    String hash;
    try {
      StringBuilder sb = new StringBuilder();
      for (byte b : MessageDigest.getInstance("SHA-256").digest(lib)) {
        sb.append(String.format("%02x", b));
      }
      hash = sb.substring(0, 32);
    } catch (java.security.NoSuchAlgorithmException e) {
      throw new IOException(e);
    }
    Path dir = Paths.get(System.getProperty("java.io.tmpdir"), "rocketstore-native");
    Files.createDirectories(dir);
    Path file = dir.resolve("librocketstore_jni-" + hash + ".so");
    if (!Files.exists(file) || Files.size(file) != lib.length) {
      // Written aside and renamed into place: a reader never sees half a file.
      Path tmp = Files.createTempFile(dir, "lib", ".tmp");
      Files.write(tmp, lib);
      Files.move(tmp, file, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }
    return file;
  }

  /** Forces the library to load (a no-op once loaded). */
  public static void ensureLoaded() {}

  public static native String columns();

  public static native long open(String path, String[] keys, String[] values);

  public static native void close(long handle);

  /** Read-only stores: follows the writer; true when new messages became visible. */
  public static native boolean refresh(long store);

  public static native long openHandles();

  public static native String[] topics(long store);

  public static native boolean isSystemTopic(String topic);

  public static native long[] queueIds(long store, String topic);

  /** what: 0 min offset, 1 end offset, 2 CommitLog offset at arg, 3 store time at arg, 4 offset by time. */
  public static native long queueAt(long store, String topic, int queueId, int what, long arg);

  public static native long[] timesMonotone(long store, String topic, int queueId, long from, long prev);

  /** [min, max, segment size, index begin, index end] (index -1, -1: none). */
  public static native long[] commitLog(long store);

  public static native long[] keyHits(long store, String topic, String key);

  public static native String[] messageById(long store, String id);

  /** [damaged, "queue_id\tqueue_offset\ttopic"...] of CommitLog [from, to) holding the keys. */
  public static native String[] keyScan(long store, long from, long to, String[] topics,
      String[] keys, int flags);

  public static native long openReader(long store, String[] qTopics, int[] qIds, long[] qBounds,
      long[] clBounds, String[] topics, int flags, long minTime, long maxTime, String[] tags,
      int batchRows, String storeName, String[] columns);

  public static native long[] nextBatch(long reader);

  public static native long[] readStats(long reader);

  /** Opens the store at path as its single writer (made if missing, recovered). */
  public static native long openWriter(String path, String[] keys, String[] values);

  /**
   * Checks (checkOnly) or appends rows (rust/jni/src/write.rs's row encoding), the first being
   * row firstRow of the job, each with the extra properties (name, value, ...). Returns
   * {appended, refused row or -1, put status, reason}.
   */
  public static native String[] appendRows(long store, byte[] rows, long firstRow, String[] extra,
      boolean checkOnly);

  /** Flushes a writer's store; returns the flushed CommitLog offset. */
  public static native long flush(long store);

  /** How many messages from CommitLog offset since on carry property prop = tag. */
  public static native long countTagged(long store, String prop, String tag, long since);

  /** Exercises the guard: 1 panics in the engine (the panic becomes an exception). */
  public static native void selfTest(int what);
}
