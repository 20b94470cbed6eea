package org.rocketstore.spark;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One partition: queue ranges (topic, queue id, [from, to)) and CommitLog ranges [from, to) of
 * one store, with the row rules the engine applies. Plain values only: the store is opened in
 * the task.
 */
final class Part implements InputPartition, Serializable {
  private static final long serialVersionUID = 1L;

  final String path;
  final String storeName;
  final List<String> qTopics = new ArrayList<>();
  final List<Integer> qIds = new ArrayList<>();
  final List<Long> qBounds = new ArrayList<>();
  final List<Long> clBounds = new ArrayList<>();
  long minTime = Long.MIN_VALUE;
  long maxTime = Long.MAX_VALUE;
  /** TAGS kept (null: every row). */
  String[] tags;

  Part(String path, String storeName) {
    this.path = path;
    this.storeName = storeName;
  }

  Part queue(String topic, int q, long from, long to) {
    qTopics.add(topic);
    qIds.add(q);
    qBounds.add(from);
    qBounds.add(to);
    return this;
  }

  Part commitLog(long from, long to) {
    clBounds.add(from);
    clBounds.add(to);
    return this;
  }

  @Override
  public String toString() {
    StringBuilder sb = new StringBuilder("Part(" + path);
    for (int i = 0; i < qTopics.size() && i < 3; i++) {
      sb.append(", ").append(qTopics.get(i)).append('/').append(qIds.get(i)).append('[')
          .append(qBounds.get(2 * i)).append(',').append(qBounds.get(2 * i + 1)).append(')');
    }
    if (!clBounds.isEmpty()) {
      sb.append(", CommitLog ").append(clBounds);
    }
    return sb.append(')').toString();
  }
}
