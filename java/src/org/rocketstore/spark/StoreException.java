package org.rocketstore.spark;

/** An error of the rocketstore engine (a damaged store, an I/O error, a closed store). */
public class StoreException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  public StoreException(String message) {
    super(message);
  }
}
