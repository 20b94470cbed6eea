package org.rocketstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;

/**
 * The driver's commit of a batch write, with the Python sink's rules
 * (python/rocketstore/spark/_commit.py, docs/spark.md): every row checked before the first
 * append, then the rows appended once per job tag recorded in config/sparkJobs.json, so a
 * rerun of a job cut short appends the rest and a finished jobTag appends nothing.
 */
final class JobCommit {
  static final String WRITE_JOB_PROPERTY = "SPARK_WRITE_JOB";
  static final String JOBS_STATE_FILE = "sparkJobs.json";
  static final int JOBS_KEPT = 1000;
  static final String[] PUT_STATUS = {"PUT_OK", "FLUSH_DISK_TIMEOUT", "FLUSH_SLAVE_TIMEOUT",
      "SLAVE_NOT_AVAILABLE", "SERVICE_NOT_AVAILABLE", "CREATE_MAPPED_FILE_FAILED",
      "MESSAGE_ILLEGAL", "PROPERTIES_SIZE_EXCEEDED", "OS_PAGE_CACHE_BUSY", "UNKNOWN_ERROR"};
  /** Bytes of rows handed to the engine per call. */
  static final int CHUNK = 8 << 20;
  private static final ObjectMapper JSON = new ObjectMapper();

  private JobCommit() {}

  /** A write refused (appended 0: nothing appended) or stopped part-way. */
  static final class CommitException extends RuntimeException {
    private static final long serialVersionUID = 1L;
    final long appended;
    final long total;

    CommitException(String message, long appended, long total, Throwable cause) {
      super(message, cause);
      this.appended = appended;
      this.total = total;
    }
  }

  /** Checks every row, appends them once per job tag, deletes the staging. */
  static long appendStaged(WriteOpts o, String jobDir, List<RocketStoreWrite.Staged> files) {
    long total = 0;
    for (RocketStoreWrite.Staged f : files) {
      total += f.rows;
    }
    try {
      if (total == 0) {
        return 0;
      }
      List<RocketStoreWrite.Staged> sorted = new ArrayList<>(files);
      sorted.sort(Comparator.comparingInt(f -> f.partition));
      long store = NativeLib.openWriter(o.path, o.fieldKeys, o.fieldValues);
      try {
        String tag = o.jobTag != null ? o.jobTag : contentTag(sorted);
        return appendJob(store, o, sorted, total, tag);
      } finally {
        NativeLib.close(store);
      }
    } finally {
      Staging.removeDir(o.stagingDir, jobDir);
    }
  }

  private static long appendJob(long store, WriteOpts o, List<RocketStoreWrite.Staged> files,
      long total, String tag) {
    String[] extra = {WRITE_JOB_PROPERTY, tag};
    ObjectNode jobs = readState(o.path, JOBS_STATE_FILE);
    JsonNode rec = jobs.get(tag);
    long present = 0;
    if (rec != null && rec.isObject() && !rec.path("done").asBoolean(false)) {
      present = NativeLib.countTagged(store, WRITE_JOB_PROPERTY, tag, rec.path("offset").asLong(0));
    } else if (rec != null && rec.isObject() && o.jobTag != null) {
      RocketStoreProvider.LOG.info("rocketstore: job {} was appended to {} already; nothing "
          + "appended", tag, o.path);
      return 0;
    }
    if (present >= total) {
      RocketStoreProvider.LOG.info("rocketstore: job {} was appended to {} already ({} rows); "
          + "nothing appended", tag, o.path, present);
      ((ObjectNode) jobs.get(tag)).put("done", true);
      saveState(o.path, JOBS_STATE_FILE, keep(jobs));
      return 0;
    }
    long skip = present;
    run(store, files, skip, extra, true, (row, status, why) -> {
      throw new CommitException("rocketstore write refused: row " + row + " of " + total
          + " (in partition order) breaks a put rule (" + status + ": " + why
          + "); nothing was appended", 0, total - skip, null);
    });
    if (present == 0) {
      ObjectNode r = JSON.createObjectNode();
      r.put("offset", NativeLib.commitLog(store)[1]);
      r.put("rows", total);
      r.put("done", false);
      jobs.set(tag, r);
      saveState(o.path, JOBS_STATE_FILE, keep(jobs));
    } else {
      RocketStoreProvider.LOG.warn("rocketstore: job {} was cut short at {} of {} rows; "
          + "appending the rest", tag, present, total);
    }
    RocketStoreProvider.LOG.info("rocketstore: appending {} rows to {} as job {}",
        total - present, o.path, tag);
    String how = "a rerun of the same write (the same rows in the same order, with jobTag='"
        + tag + "' if it was given) appends the rest without duplicates";
    long todo = total - present;
    long[] done = {0};
    try {
      done[0] = run(store, files, skip, extra, false, (row, status, why) -> {
        throw new CommitException("rocketstore commit stopped: " + done[0] + " of " + todo
            + " rows appended; row " + row + " was refused (" + status + ": " + why
            + "); the rows before it are in the store, and rows after it in the same batch may "
            + "be too; " + how, done[0], todo, null);
      }, done);
    } catch (CommitException e) {
      throw e;
    } catch (RuntimeException e) {
      throw new CommitException("rocketstore commit failed part-way (" + e.getMessage()
          + "); the rows appended before the failure stay in the store, and " + how, -1, todo, e);
    }
    NativeLib.flush(store);
    ((ObjectNode) jobs.get(tag)).put("done", true);
    saveState(o.path, JOBS_STATE_FILE, keep(jobs));
    return done[0];
  }

  interface Refusal {
    void refused(long row, String status, String why);
  }

  /** Checks (check) or appends the rows after the first skip; returns rows appended. */
  static long run(long store, List<RocketStoreWrite.Staged> files, long skip,
      String[] extra, boolean check, Refusal onRefused) {
    return run(store, files, skip, extra, check, onRefused, new long[1]);
  }

  /** Hands the rows after the first skip to the engine in chunks; returns rows appended. */
  static long run(long store, List<RocketStoreWrite.Staged> files, long skip,
      String[] extra, boolean check, Refusal onRefused, long[] appended) {
    long row = 0;
    long first = skip;
    ByteArrayOutputStream chunk = new ByteArrayOutputStream();
    try {
      for (RocketStoreWrite.Staged f : files) {
        if (f.rows == 0) {
          continue;
        }
        try (InputStream in = Files.newInputStream(Paths.get(f.path));
            DataInputStream d = new DataInputStream(new java.io.BufferedInputStream(in, 1 << 20))) {
          while (true) {
            int n;
            try {
              n = d.readInt();
            } catch (EOFException e) {
              break;
            }
            byte[] b = new byte[n];
            d.readFully(b);
            if (row++ < skip) {
              continue;
            }
            chunk.write(b);
            if (chunk.size() >= CHUNK) {
              first = send(store, chunk, first, row, extra, check, onRefused, appended);
            }
          }
        }
      }
      send(store, chunk, first, row, extra, check, onRefused, appended);
    } catch (IOException e) {
      throw new UncheckedIOException("reading the staged rows", e);
    }
    return appended[0];
  }

  private static long send(long store, ByteArrayOutputStream chunk, long first, long next,
      String[] extra, boolean check, Refusal onRefused, long[] appended) {
    if (chunk.size() == 0) {
      return first;
    }
    String[] r = NativeLib.appendRows(store, chunk.toByteArray(), first, extra, check);
    chunk.reset();
    appended[0] += Long.parseLong(r[0]);
    long refused = Long.parseLong(r[1]);
    if (refused >= 0) {
      int st = Integer.parseInt(r[2]);
      onRefused.refused(refused, st >= 0 && st < PUT_STATUS.length ? PUT_STATUS[st] : r[2], r[3]);
    }
    return next;
  }

  /** A batch write's default job tag: a digest of its staged rows in partition order. */
  static String contentTag(List<RocketStoreWrite.Staged> files) {
    try {
      MessageDigest h = MessageDigest.getInstance("SHA-256");
      for (RocketStoreWrite.Staged f : files) {
        if (f.rows == 0) {
          continue;
        }
        h.update((f.rows + "\n").getBytes(StandardCharsets.US_ASCII));
        try (InputStream in = Files.newInputStream(Paths.get(f.path))) {
          byte[] buf = new byte[1 << 20];
          for (int n; (n = in.read(buf)) > 0; ) {
            h.update(buf, 0, n);
          }
        }
      }
      StringBuilder s = new StringBuilder("rows-");
      for (byte b : h.digest()) {
        s.append(String.format("%02x", b));
      }
      return s.substring(0, 5 + 32);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }

  private static Path stateFile(String path, String name) {
    return Paths.get(path, "config", name);
  }

  /** The store's config file {@code name} (an empty object when missing or unreadable). */
  static ObjectNode readState(String path, String name) {
    try {
      JsonNode n = JSON.readTree(stateFile(path, name).toFile());
      return n != null && n.isObject() ? (ObjectNode) n : JSON.createObjectNode();
    } catch (IOException e) {
      return JSON.createObjectNode();
    }
  }

  /** Replaces the store's config file {@code name} by {@code state}, durably. */
  static void saveState(String path, String name, ObjectNode state) {
    Path p = stateFile(path, name);
    Path tmp = p.resolveSibling(name.replace(".json", ".tmp"));
    try {
      Files.createDirectories(p.getParent());
      Files.deleteIfExists(tmp);
      Staging.writeSynced(tmp, JSON.writeValueAsBytes(state));
      Files.move(tmp, p, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    } catch (IOException e) {
      throw new UncheckedIOException("cannot record the write in " + p, e);
    }
  }

  /** Every unfinished job, and the newest JOBS_KEPT finished ones. */
  private static ObjectNode keep(ObjectNode jobs) {
    List<Map.Entry<String, JsonNode>> done = new ArrayList<>();
    for (Map.Entry<String, JsonNode> e : jobs.properties()) {
      if (e.getValue().isObject() && e.getValue().path("done").asBoolean(false)) {
        done.add(e);
      }
    }
    done.sort(Comparator.comparingLong(e -> e.getValue().path("offset").asLong(0)));
    ObjectNode out = JSON.createObjectNode();
    List<String> drop = new ArrayList<>();
    for (int i = 0; i < Math.max(0, done.size() - JOBS_KEPT); i++) {
      drop.add(done.get(i).getKey());
    }
    for (Map.Entry<String, JsonNode> e : jobs.properties()) {
      if (e.getValue().isObject() && !drop.contains(e.getKey())) {
        out.set(e.getKey(), e.getValue());
      }
    }
    return out;
  }
}
