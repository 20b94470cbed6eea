package org.rocketstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.io.File;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Comparator;
import java.util.Objects;
import java.util.UUID;
import java.util.stream.Stream;

/**
 * The write path's staging directory, laid out as the Python sink's
 * (python/rocketstore/spark/_staging.py): {@code job-<uuid>/owner.json} (a batch write) and
 * {@code stream-<sink>-<batch id>/owner.json} (a micro-batch of a streaming sink) plus the
 * tasks' staged files, made whole under {@code .new-*} and renamed into place, deleted by
 * renaming to {@code .trash-*} first; what a dead driver left is reclaimed by the next write.
 */
final class Staging {
  static final String OWNER_FILE = "owner.json";
  /** Age after which a directory without a readable owner is taken as abandoned. */
  static final long UNOWNED_GRACE_MS = 3_600_000L;

  private Staging() {}

  /** A new batch write's directory (on the driver, at planning). */
  static String makeJobDir(String root) {
    reclaim(root);
    Path d = Paths.get(root, "job-" + UUID.randomUUID().toString().replace("-", ""));
    makeWhole(root, d, owner());
    return d.toString();
  }

  /**
   * Makes directory {@code d} in {@code root} holding {@code owner.json}, whole: made under
   * {@code .new-*} and renamed into place. False when it exists already.
   */
  static boolean makeWhole(String root, Path d, String owner) {
    Path tmp = null;
    try {
      Path r = Paths.get(root);
      for (int i = 0; tmp == null; i++) { // the root may vanish (a job removing it when empty)
        Files.createDirectories(r);
        try {
          tmp = Files.createTempDirectory(r, ".new-");
        } catch (NoSuchFileException e) {
          if (i == 4) {
            throw e;
          }
        }
      }
      writeSynced(tmp.resolve(OWNER_FILE), owner.getBytes(StandardCharsets.UTF_8));
      try {
        Files.move(tmp, d, StandardCopyOption.ATOMIC_MOVE);
      } catch (IOException e) {
        if (Files.isDirectory(d)) {
          return false;
        }
        throw e;
      }
      tmp = null;
      return true;
    } catch (IOException e) {
      throw new UncheckedIOException("cannot make the staging directory " + d, e);
    } finally {
      if (tmp != null) {
        delete(tmp);
      }
    }
  }

  /** The directory of micro-batch {@code batchId} of sink {@code sinkName}. */
  static Path streamBatchDir(String root, String sinkName, long batchId) {
    return Paths.get(root, sinkPrefix(sinkName) + batchId);
  }

  /** A micro-batch's directory, made by its first task (owned by the query's driver). */
  static String batchDirOfStream(String root, String sinkName, long batchId, String owner) {
    Path d = streamBatchDir(root, sinkName, batchId);
    if (!Files.isDirectory(d)) {
      makeWhole(root, d, owner);
    }
    return d.toString();
  }

  /** {@code stream-<sink name, percent-encoded as Python's quote(safe='')>-}. */
  static String sinkPrefix(String sinkName) {
    StringBuilder sb = new StringBuilder("stream-");
    for (byte b : sinkName.getBytes(StandardCharsets.UTF_8)) {
      int c = b & 0xff;
      if (c < 0x80 && (Character.isLetterOrDigit(c) || "_.-~".indexOf(c) >= 0)) {
        sb.append((char) c);
      } else {
        sb.append('%').append(String.format("%02X", c));
      }
    }
    return sb.append('-').toString();
  }

  /**
   * Deletes the sink's micro-batch directories of batch ids up to {@code upto} (Spark commits
   * micro-batches in order: older ones are done or replayed).
   */
  static void removeStreamBatches(String root, String sinkName, long upto) {
    String prefix = sinkPrefix(sinkName);
    String[] names = new File(root).list();
    if (names == null) {
      return;
    }
    for (String n : names) {
      String id = n.startsWith(prefix) ? n.substring(prefix.length()) : "";
      if (!id.isEmpty() && id.length() < 19 && id.chars().allMatch(c -> c >= '0' && c <= '9')
          && Long.parseLong(id) <= upto) {
        removeDir(root, Paths.get(root, n).toString());
      }
    }
    new File(root).delete(); // only when empty
  }

  static void writeSynced(Path p, byte[] data) throws IOException {
    try (FileChannel ch = FileChannel.open(p, StandardOpenOption.WRITE,
        StandardOpenOption.CREATE_NEW)) {
      ch.write(java.nio.ByteBuffer.wrap(data));
      ch.force(true);
    }
  }

  /** This driver's identity, for {@code owner.json} (the Python sink's record). */
  static String owner() {
    ObjectNode o = new ObjectMapper().createObjectNode();
    long pid = ProcessHandle.current().pid();
    o.put("host", host());
    o.put("boot", bootId());
    o.put("pid", pid);
    Long start = procStart(pid);
    if (start != null) {
      o.put("start", start);
    } else {
      o.putNull("start");
    }
    return o.toString();
  }

  private static String host() {
    String h = read("/proc/sys/kernel/hostname").trim(); // gethostname(), as Python's
    if (h.isEmpty()) {
      try {
        h = java.net.InetAddress.getLocalHost().getHostName();
      } catch (IOException e) {
        h = "";
      }
    }
    return h;
  }

  private static String bootId() {
    return read("/proc/sys/kernel/random/boot_id").trim();
  }

  /** The start time (clock ticks since boot) of process {@code pid}, or null. */
  private static Long procStart(long pid) {
    String stat = read("/proc/" + pid + "/stat");
    int close = stat.lastIndexOf(')');
    String[] f = close < 0 ? new String[0] : stat.substring(close + 1).trim().split("\\s+");
    try {
      return f.length > 19 ? Long.valueOf(f[19]) : null;
    } catch (NumberFormatException e) {
      return null;
    }
  }

  /** True only when the owner is known dead (never for another host). */
  private static boolean ownerDead(JsonNode owner) {
    if (!host().equals(owner.path("host").asText(null))) {
      return false;
    }
    if (!bootId().equals(owner.path("boot").asText(null))) {
      return true;
    }
    JsonNode pid = owner.get("pid");
    if (pid == null || !pid.isIntegralNumber()) {
      return false;
    }
    JsonNode start = owner.get("start");
    Long recorded = start != null && start.isIntegralNumber() ? start.asLong() : null;
    return !Objects.equals(procStart(pid.asLong()), recorded);
  }

  private static JsonNode readOwner(Path d) {
    try {
      JsonNode n = new ObjectMapper().readTree(d.resolve(OWNER_FILE).toFile());
      return n != null && n.isObject() ? n : null;
    } catch (IOException e) {
      return null;
    }
  }

  /**
   * Removes what crashed writers left in {@code root} (the Python sink's rules): directories
   * whose driver is known dead, unowned ones older than an hour, and unfinished deletions.
   */
  static void reclaim(String root) {
    String[] names = new File(root).list();
    if (names == null) {
      return;
    }
    for (String n : names) {
      Path d = Paths.get(root, n);
      if (!Files.isDirectory(d)) {
        continue;
      }
      if (n.startsWith(".trash-")) {
        delete(d);
        continue;
      }
      JsonNode owner = readOwner(d);
      if (owner == null) {
        long age = System.currentTimeMillis() - d.toFile().lastModified();
        if (age <= UNOWNED_GRACE_MS) {
          continue;
        }
      } else if (!ownerDead(owner)) {
        continue;
      }
      RocketStoreProvider.LOG.info("rocketstore: removing {}, left by a writer that is gone", d);
      removeDir(root, d.toString());
    }
    new File(root).delete(); // only when empty
  }

  private static String read(String p) {
    try {
      return new String(Files.readAllBytes(Paths.get(p)), StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "";
    }
  }

  /** Deletes a staging directory (renamed out of the way first), and the root if now empty. */
  static void removeDir(String root, String dir) {
    Path r = Paths.get(root);
    Path trash = r.resolve(".trash-" + UUID.randomUUID().toString().replace("-", ""));
    Path gone;
    try {
      Files.move(Paths.get(dir), trash, StandardCopyOption.ATOMIC_MOVE);
      gone = trash;
    } catch (NoSuchFileException e) {
      gone = null;
    } catch (IOException e) {
      gone = Paths.get(dir);
    }
    if (gone != null) {
      delete(gone);
    }
    r.toFile().delete(); // only when empty
  }

  /** Deletes {@code p} and what it holds (what is left is reclaimed later). */
  static void delete(Path p) {
    try (Stream<Path> w = Files.walk(p)) {
      w.sorted(Comparator.reverseOrder()).forEach(x -> x.toFile().delete());
    } catch (IOException e) {
      // what is left is reclaimed by a later write's planning
    }
  }
}
