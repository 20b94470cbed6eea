#!/usr/bin/env bash
# Builds the JVM Spark connector: the pyo3-free native library (rust/jni, the
# same engine code as the Python module) and the Java sources (java/src),
# compiled with plain javac against the Spark jars PySpark ships, into one
# jar holding the library:
#
#   python/rocketstore/spark/jars/rocketstore-spark.jar
#
# Usage: scripts/build-jar.sh [--debug]. Needs a JDK (javac, jar; 17) and
# pyspark. Without a JDK it says so and exits 3: the Python package builds
# and works without the connector. CARGO_TARGET_DIR is honoured (a release
# build shares its dependency builds with the wheel's).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=release
[[ "${1:-}" == "--debug" ]] && profile=debug
if ! command -v javac >/dev/null || ! command -v jar >/dev/null; then
    echo "build-jar: no JDK (javac/jar) on PATH: the JVM Spark connector is not built" >&2
    exit 3
fi
jars="$(python3 -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')"
target="${CARGO_TARGET_DIR:-target}"
if [[ "$profile" == release ]]; then
    cargo build -p rocketstore-jni --release
else
    cargo build -p rocketstore-jni
fi
lib="$target/$profile/librocketstore_jni.so"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/classes/native/linux-x86_64"
cp "$lib" "$work/classes/native/linux-x86_64/librocketstore_jni.so"
cp -r java/resources/. "$work/classes/"
javac -nowarn -source 17 -target 17 -encoding UTF-8 -cp "$jars/*" -d "$work/classes" \
    $(find java/src -name '*.java' | sort)
out=python/rocketstore/spark/jars
mkdir -p "$out"
jar --create --file "$work/rocketstore-spark.jar" -C "$work/classes" .
mv "$work/rocketstore-spark.jar" "$out/rocketstore-spark.jar"
echo "build-jar: $out/rocketstore-spark.jar"
