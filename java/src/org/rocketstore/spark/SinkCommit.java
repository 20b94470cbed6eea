package org.rocketstore.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.TreeSet;

/**
 * The streaming sink's commit of one micro-batch, with the Python sink's rules
 * ({@code append_stream_batch} in python/rocketstore/spark/_commit.py, docs/spark.md) over the
 * same files, so either connector's sink resumes the other's: every message is tagged
 * {@code SPARK_SINK_BATCH = "<sinkName>:<batch id>"}; before appending batch N the commit
 * counts the messages tagged N from the CommitLog offset where the sink's last batch began
 * ({@code config/sparkSink.json}, a hint: the data is the proof): all there, it appends
 * nothing; a prefix there (a commit cut short), it appends the rest. Every row to append is
 * checked against the put rules before the first is appended.
 */
final class SinkCommit {
  static final String SINK_BATCH_PROPERTY = "SPARK_SINK_BATCH";
  static final String SINK_STATE_FILE = "sparkSink.json";

  private SinkCommit() {}

  /** Appends micro-batch {@code batchId} once per (sink name, batch id); returns rows appended. */
  static long appendBatch(WriteOpts o, List<RocketStoreWrite.Staged> files, long batchId) {
    long total = 0;
    for (RocketStoreWrite.Staged f : files) {
      total += f.rows;
    }
    List<RocketStoreWrite.Staged> sorted = new ArrayList<>(files);
    sorted.sort(Comparator.comparingInt(f -> f.partition));
    try {
      long store = NativeLib.openWriter(o.path, o.fieldKeys, o.fieldValues);
      try {
        return append(store, o, sorted, total, batchId);
      } finally {
        NativeLib.close(store);
      }
    } finally {
      removeStaging(o, files, batchId);
    }
  }

  private static long append(long store, WriteOpts o, List<RocketStoreWrite.Staged> files,
      long total, long batchId) {
    String tag = o.sinkName + ":" + batchId;
    String[] extra = {SINK_BATCH_PROPERTY, tag};
    ObjectNode state = JobCommit.readState(o.path, SINK_STATE_FILE);
    long[] cl = NativeLib.commitLog(store);
    JsonNode mine = state.path(o.sinkName);
    long since = Math.max(Math.max(mine.path("offset").asLong(cl[0]), cl[0]), 0);
    long present = NativeLib.countTagged(store, SINK_BATCH_PROPERTY, tag, since);
    if (present >= total && total > 0) {
      RocketStoreProvider.LOG.info("rocketstore sink {}: batch {} already appended; skipped",
          o.sinkName, batchId);
      return 0;
    }
    long skip = present;
    JobCommit.run(store, files, skip, extra, true, (row, status, why) -> {
      throw new JobCommit.CommitException("rocketstore write refused: row " + row + " of "
          + total + " (in partition order) breaks a put rule (" + status + ": " + why
          + "); nothing was appended", 0, total - skip, null);
    });
    if (present > 0) {
      RocketStoreProvider.LOG.warn("rocketstore sink {}: batch {} was cut short at {} of {} "
          + "rows; appending the rest", o.sinkName, batchId, present, total);
    }
    long start = cl[1];
    String replay = "Spark's replay of the micro-batch appends the rest";
    long todo = total - present;
    long[] done = {0};
    try {
      JobCommit.run(store, files, skip, extra, false, (row, status, why) -> {
        throw new JobCommit.CommitException("rocketstore commit stopped: " + done[0] + " of "
            + todo + " rows appended; row " + row + " was refused (" + status + ": " + why
            + "); the rows before it are in the store, and rows after it in the same batch may "
            + "be too; " + replay, done[0], todo, null);
      }, done);
    } catch (JobCommit.CommitException e) {
      throw e;
    } catch (RuntimeException e) {
      throw new JobCommit.CommitException("rocketstore commit failed part-way (" + e.getMessage()
          + "); the rows appended before the failure stay in the store, and " + replay, -1,
          todo, e);
    }
    NativeLib.flush(store);
    ObjectNode rec = new ObjectMapper().createObjectNode();
    rec.put("batch", batchId);
    rec.put("offset", start);
    state.set(o.sinkName, rec);
    JobCommit.saveState(o.path, SINK_STATE_FILE, state);
    return done[0];
  }

  /** Deletes a micro-batch's staging, and that of the sink's older ones (done or replayed). */
  static void removeStaging(WriteOpts o, List<RocketStoreWrite.Staged> files, long batchId) {
    TreeSet<String> dirs = new TreeSet<>();
    for (RocketStoreWrite.Staged f : files) {
      dirs.add(Paths.get(f.path).getParent().toString());
    }
    for (String d : dirs) {
      Staging.removeDir(o.stagingDir, d);
    }
    Staging.removeStreamBatches(o.stagingDir, o.sinkName, batchId);
  }
}
