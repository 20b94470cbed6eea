#!/usr/bin/env bash
# Builds the JVM Spark connector: the pyo3-free native library (rust/jni, the
# same engine code as the Python module) and the Java sources (java/src),
# compiled with plain javac against the Spark jars PySpark ships, into one
# jar holding the library:
#
#   python/rocketstore/spark/jars/rocketstore-spark.jar
#
# Usage: scripts/build-jar.sh [--debug | --manylinux]
#
#   (none)       release build of the library, linked for this machine
#   --debug      debug build (the Spark tests' build: one quick compile)
#   --manylinux  release build linked the way the wheel's extension is
#                (scripts/build-dist.sh): with zig through maturin's
#                `maturin zig cc`, against glibc 2.17 (manylinux2014), for
#                x86_64-unknown-linux-gnu, symbols stripped; needs maturin
#                and zig (`python3 -m ziglang`) on PATH, as build-dist.sh's
#                tools venv provides them. A linker already set in
#                CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER is kept:
#                build-dist.sh runs this in the environment maturin gives
#                cargo for the wheel (maturin's own zig wrapper), so the
#                wheel's build reuses these dependency builds
#
# Needs a JDK (javac, jar; 17) and pyspark (or SPARK_JARS: the folder of
# the Spark jars to compile against). Without a JDK it says so and
# exits 3: the Python package builds and works without the connector (the
# release build, scripts/build-dist.sh, fails then). javac runs with every
# lint but `path` (the Spark jars' manifests), `classfile` (annotations of
# the Arrow jars) and `serial` (the classes Spark serializes are those of
# one jar on both ends), and any warning fails the build.
# CARGO_TARGET_DIR is honoured (a release build shares its dependency
# builds with the wheel's).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=release
case "${1:-}" in
    "") ;;
    --debug) mode=debug ;;
    --manylinux) mode=manylinux ;;
    *) echo "usage: scripts/build-jar.sh [--debug | --manylinux]" >&2; exit 2 ;;
esac
if ! command -v javac >/dev/null || ! command -v jar >/dev/null; then
    echo "build-jar: no JDK (javac/jar) on PATH: the JVM Spark connector is not built" >&2
    exit 3
fi
# Spark's jars: SPARK_JARS, else those of the pyspark python3 imports.
jars="${SPARK_JARS:-$(python3 -c 'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))')}"
[ -d "$jars" ] || { echo "build-jar: no Spark jars at $jars" >&2; exit 2; }
target="${CARGO_TARGET_DIR:-target}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
case "$mode" in
    debug)
        cargo build -p rocketstore-jni
        lib="$target/debug/librocketstore_jni.so"
        ;;
    release)
        cargo build -p rocketstore-jni --release
        lib="$target/release/librocketstore_jni.so"
        ;;
    manylinux)
        triple=x86_64-unknown-linux-gnu
        command -v maturin >/dev/null || { echo "build-jar: --manylinux needs maturin on PATH" >&2; exit 2; }
        python3 -m ziglang version >/dev/null || { echo "build-jar: --manylinux needs zig (python3 -m ziglang)" >&2; exit 2; }
        if [ -z "${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER:-}" ]; then
            # The linker: zig for glibc 2.17, through maturin's wrapper of
            # it, with the arguments maturin links the wheel's extension
            # with. Its path is part of cargo's fingerprint: a stable one
            # keeps a repeated build incremental.
            mkdir -p "$target/jni-zig"
            zigcc="$(cd "$target/jni-zig" && pwd)/zigcc-x86_64-linux-gnu.2.17.sh"
            cat >"$zigcc" <<ZIG
#!/bin/sh
exec "$(command -v maturin)" zig cc -- -g -fno-sanitize=all -target x86_64-linux-gnu.2.17 "\$@"
ZIG
            chmod +x "$zigcc"
            export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER="$zigcc"
        fi
        echo "build-jar: linker $CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER"
        # Stripping is asked of the last link only: the dependencies are the
        # same builds as without it. Only the cdylib, as maturin builds the
        # wheel's extension: with the rlib too, cargo would compile every
        # dependency with object code beside the LTO bitcode (another
        # profile), not reusing the wheel's dependency builds.
        cargo rustc -p rocketstore-jni --lib --crate-type cdylib --release --target "$triple" -- -C strip=symbols
        lib="$target/$triple/release/librocketstore_jni.so"
        ;;
esac
mkdir -p "$work/classes/native/linux-x86_64"
cp "$lib" "$work/classes/native/linux-x86_64/librocketstore_jni.so"
cp -r java/resources/. "$work/classes/"
javac -Xlint:all,-path,-classfile,-serial -Werror -source 17 -target 17 -encoding UTF-8 \
    -cp "$jars/*" -d "$work/classes" $(find java/src -name '*.java' | sort)
out=python/rocketstore/spark/jars
mkdir -p "$out"
jar --create --file "$work/rocketstore-spark.jar" -C "$work/classes" .
mv "$work/rocketstore-spark.jar" "$out/rocketstore-spark.jar"
echo "build-jar: $out/rocketstore-spark.jar ($mode)"
