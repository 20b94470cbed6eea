package org.rocketstore.spark;

import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.Channels;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriter;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.connector.write.streaming.StreamingWrite;

/**
 * Batch writes: tasks stage their rows in a job directory the driver made at planning, and the
 * driver's commit checks and appends them once ({@link JobCommit}), as the Python sink does;
 * streaming writes: {@link RocketStoreSink}. A staged file holds the rows in the native row
 * encoding, each after its length (an int).
 */
final class RocketStoreWrite implements WriteBuilder, Write {
  private final Map<String, String> options;
  private final RowCodec codec;

  RocketStoreWrite(LogicalWriteInfo info) {
    RowCodec.checkSchema(info.schema());
    this.options = info.options().asCaseSensitiveMap();
    this.codec = new RowCodec(info.schema());
  }

  @Override
  public Write build() {
    return this;
  }

  @Override
  public BatchWrite toBatch() {
    WriteOpts opts = new WriteOpts(options, false);
    return new Job(opts, codec, Staging.makeJobDir(opts.stagingDir));
  }

  @Override
  public StreamingWrite toStreaming() {
    return new RocketStoreSink(new WriteOpts(options, true), codec);
  }

  /** A task's staged rows (a commit message). */
  static final class Staged implements WriterCommitMessage {
    private static final long serialVersionUID = 1L;
    final String path;
    final int partition;
    final long rows;

    Staged(String path, int partition, long rows) {
      this.path = path;
      this.partition = partition;
      this.rows = rows;
    }
  }

  static List<Staged> staged(WriterCommitMessage[] messages) {
    List<Staged> out = new ArrayList<>();
    for (WriterCommitMessage m : messages) {
      if (m instanceof Staged) {
        out.add((Staged) m);
      }
    }
    return out;
  }

  static final class Job implements BatchWrite {
    private final WriteOpts opts;
    private final RowCodec codec;
    private final String jobDir;

    Job(WriteOpts opts, RowCodec codec, String jobDir) {
      this.opts = opts;
      this.codec = codec;
      this.jobDir = jobDir;
    }

    @Override
    public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo info) {
      return new Factory(codec, jobDir);
    }

    @Override
    public void commit(WriterCommitMessage[] messages) {
      long n = JobCommit.appendStaged(opts, jobDir, staged(messages));
      RocketStoreProvider.LOG.info("rocketstore: appended {} rows to {}", n, opts.path);
    }

    @Override
    public void abort(WriterCommitMessage[] messages) {
      Staging.removeDir(opts.stagingDir, jobDir);
    }
  }

  static final class Factory implements DataWriterFactory {
    private static final long serialVersionUID = 1L;
    private final RowCodec codec;
    private final String dir;

    Factory(RowCodec codec, String dir) {
      this.codec = codec;
      this.dir = dir;
    }

    @Override
    public DataWriter<InternalRow> createWriter(int partitionId, long taskId) {
      return new TaskWriter(codec, dir, partitionId);
    }
  }

  /** A task's rows, staged to one file (the task does not make the directory). */
  static final class TaskWriter implements DataWriter<InternalRow> {
    private final RowCodec codec;
    private final int partition;
    private final Path path;
    private final FileChannel ch;
    private final DataOutputStream out;
    private final ByteArrayOutputStream row = new ByteArrayOutputStream();
    private final DataOutputStream rowOut = new DataOutputStream(row);
    private long rows;
    private boolean done;

    TaskWriter(RowCodec codec, String dir, int partition) {
      this.codec = codec;
      this.partition = partition;
      this.path = Paths.get(dir, String.format("part-%05d-%s.rows", partition,
          UUID.randomUUID().toString().replace("-", "")));
      try {
        ch = FileChannel.open(path, StandardOpenOption.WRITE, StandardOpenOption.CREATE_NEW);
      } catch (NoSuchFileException e) {
        throw new IllegalStateException("the staging directory " + dir + " is gone: the write "
            + "was aborted or its staging removed");
      } catch (IOException e) {
        throw new UncheckedIOException(e);
      }
      out = new DataOutputStream(new BufferedOutputStream(Channels.newOutputStream(ch), 1 << 20));
    }

    @Override
    public void write(InternalRow record) throws IOException {
      row.reset();
      codec.encode(record, rowOut);
      rowOut.flush();
      out.writeInt(row.size());
      row.writeTo(out);
      rows++;
    }

    @Override
    public WriterCommitMessage commit() throws IOException {
      out.flush();
      ch.force(true);
      done = true;
      return new Staged(path.toString(), partition, rows);
    }

    @Override
    public void abort() throws IOException {
      close();
      Files.deleteIfExists(path);
    }

    @Override
    public void close() throws IOException {
      if (ch.isOpen()) {
        try {
          out.close();
        } catch (IOException e) {
          if (done) {
            throw e;
          }
        }
      }
    }
  }
}
