package org.rocketstore.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Comparator;
import java.util.UUID;
import java.util.stream.Stream;

/**
 * The write path's staging directory, laid out as the Python sink's
 * (python/rocketstore/spark/_staging.py): {@code job-<uuid>/owner.json} plus the tasks' staged
 * files, made whole under {@code .new-*} and renamed into place, deleted by renaming to
 * {@code .trash-*} first.
 */
final class Staging {
  private Staging() {}

  /** A new batch write's directory (on the driver, at planning). */
  static String makeJobDir(String root) {
    try {
      Path r = Paths.get(root);
      Files.createDirectories(r);
      Path tmp = Files.createTempDirectory(r, ".new-");
      writeSynced(tmp.resolve("owner.json"), owner().getBytes(StandardCharsets.UTF_8));
      Path d = r.resolve("job-" + UUID.randomUUID().toString().replace("-", ""));
      Files.move(tmp, d, StandardCopyOption.ATOMIC_MOVE);
      return d.toString();
    } catch (IOException e) {
      throw new UncheckedIOException("cannot make the staging directory in " + root, e);
    }
  }

  static void writeSynced(Path p, byte[] data) throws IOException {
    try (FileChannel ch = FileChannel.open(p, StandardOpenOption.WRITE,
        StandardOpenOption.CREATE_NEW)) {
      ch.write(java.nio.ByteBuffer.wrap(data));
      ch.force(true);
    }
  }

  private static String owner() {
    ObjectNode o = new ObjectMapper().createObjectNode();
    long pid = ProcessHandle.current().pid();
    try {
      o.put("host", InetAddress.getLocalHost().getHostName());
    } catch (IOException e) {
      o.put("host", "");
    }
    o.put("boot", read("/proc/sys/kernel/random/boot_id").trim());
    o.put("pid", pid);
    String stat = read("/proc/" + pid + "/stat");
    int close = stat.lastIndexOf(')');
    String[] f = close < 0 ? new String[0] : stat.substring(close + 1).trim().split("\\s+");
    if (f.length > 19) {
      o.put("start", Long.parseLong(f[19]));
    } else {
      o.putNull("start");
    }
    return o.toString();
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
      try (Stream<Path> w = Files.walk(gone)) {
        w.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
      } catch (IOException e) {
        // what is left is reclaimed by a later write's planning
      }
    }
    r.toFile().delete(); // only when empty
  }
}
