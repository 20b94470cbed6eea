#!/usr/bin/env bash
# Builds the release wheel and the sdist into dist/ and checks them the way a
# user gets them. Fails loudly (non-zero exit, "build-dist: FAILED ...") on
# any miss.
#
#   1. build tools (scripts/dist-requirements.txt: maturin, the zig of the
#      `ziglang` package, auditwheel, twine) in their own venv under target/
#   2. the environment maturin gives cargo: maturin build --release --zig
#      --compatibility manylinux2014 --strip with a `cargo` on PATH that
#      records the build command's environment (maturin's zig linker
#      wrapper, C compilers, flags) and stops it before it compiles
#      anything (maturin then fails, as expected: only the recording counts)
#   3. the JVM Spark connector's jar: scripts/build-jar.sh --manylinux in
#      that recorded environment, so its native library is linked by the
#      same zig for glibc 2.17 and the wheel's build (next step) reuses its
#      dependency builds (the linker is part of cargo's fingerprint of every
#      unit: a linker of its own would compile them all a second time; the
#      wheel's build then compiles only pyo3 and the crates only it uses,
#      and the engine with pyo3); maturin has no pre-build hook, so this
#      script is what builds it. It needs a JDK 17 and pyspark (the spark
#      extra); without them the release build FAILS (a wheel built from
#      source without them, `pip install .`, works and has no connector)
#   4. the maturin build -> one abi3 wheel tagged manylinux2014_x86_64
#      (glibc >= 2.17), holding the jar (pyproject.toml's `include`); then
#      maturin sdist
#   5. scripts/check_dist.py: tags, `auditwheel show`, ELF (glibc versions,
#      libraries, stripped), no fail points compiled in, contents, the jar
#      and its native library (the same ELF rules, every JNI entry point),
#      metadata; `twine check --strict` renders the readme of both
#   6. the wheel in a fresh venv per CPython >= 3.11 found here, with PATH
#      stripped of cargo/rustc: `rocketstore demo`, `rocketstore --version`
#      and scripts/smoke_test.py (which also loads the jar's native library
#      in a JVM); CPython 3.10 must refuse it
#   7. the sdist built from scratch in a fresh venv (with Rust), then the
#      same smoke test
#
# Environment: PYTHON (default python3.11) runs the tools; DIST_OUT (default
# dist/) receives the artifacts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${DIST_OUT:-$ROOT/dist}
WORK=$ROOT/target/dist-check
PY=${PYTHON:-python3.11}
ORIG_PATH=$PATH
export PIP_DISABLE_PIP_VERSION_CHECK=1

T0=$SECONDS
TIMES=()
LAST=$SECONDS
step() {
    if [ -n "${STEP:-}" ]; then TIMES+=("$(printf '%5d s  %s' $((SECONDS - LAST)) "$STEP")"); fi
    STEP=$1
    LAST=$SECONDS
    echo "== build-dist: $1 =="
}
die() {
    echo "build-dist: FAILED: $*" >&2
    exit 1
}
trap 'rc=$?; [ $rc -eq 0 ] || echo "build-dist: FAILED (exit $rc) in step \"${STEP:-}\" after $((SECONDS - T0)) s" >&2' EXIT

# -- 1. tools ----------------------------------------------------------------------
step "build tools"
TOOLS=$WORK/tools
if ! cmp -s scripts/dist-requirements.txt "$TOOLS/requirements.txt"; then
    rm -rf "$TOOLS"
    "$PY" -m venv "$TOOLS"
    "$TOOLS/bin/pip" install -q -r scripts/dist-requirements.txt
    cp scripts/dist-requirements.txt "$TOOLS/requirements.txt"
fi
# maturin finds zig as `python3 -m ziglang` of this venv.
export PATH=$TOOLS/bin:$ORIG_PATH
echo "maturin $(maturin --version | cut -d' ' -f2), zig $(python3 -m ziglang version)," \
    "auditwheel $(auditwheel --version | cut -d' ' -f2), twine $(twine --version | head -1 | cut -d' ' -f2)"

# -- 2. the environment maturin gives cargo -----------------------------------------
step "the wheel build's cargo environment (zig, manylinux2014)"
JAR=python/rocketstore/spark/jars/rocketstore-spark.jar
rm -f "$JAR"
# Spark's jars, of the pyspark the project's Python has (the tools venv has none).
SPARK_JARS=$(env PATH="$ORIG_PATH" python3 -c \
    'import os, pyspark; print(os.path.join(os.path.dirname(pyspark.__file__), "jars"))') ||
    die "the release wheel carries the JVM connector, whose build needs pyspark (the spark extra)"
WHEEL_ARGS=(--release --zig --compatibility manylinux2014 --strip)
SHIM=$WORK/cargo-env
CARGO_ENV=$SHIM/cargo.env
rm -rf "$SHIM" "$WORK/wheel-dry-run"
mkdir -p "$SHIM"
REAL_CARGO=$(command -v cargo) || die "no cargo on PATH"
# The recording is a sourceable `export -p` of the build command's
# environment (`cargo metadata` runs as usual); the build itself is stopped.
cat >"$SHIM/cargo" <<SHIM
#!/bin/sh
case " \$* " in
    *" rustc "* | *" build "*)
        export -p >"\$RECORD_CARGO_ENV"
        echo "build-dist: cargo's environment recorded; this build stops here" >&2
        exit 1 ;;
esac
exec "$REAL_CARGO" "\$@"
SHIM
chmod +x "$SHIM/cargo"
env PATH="$SHIM:$PATH" RECORD_CARGO_ENV="$CARGO_ENV" \
    maturin build "${WHEEL_ARGS[@]}" --out "$WORK/wheel-dry-run" >/dev/null 2>&1 || true
[ -s "$CARGO_ENV" ] || die "maturin ran no cargo build through $SHIM/cargo"
grep -q "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER=" "$CARGO_ENV" ||
    die "maturin gave cargo no zig linker (CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_LINKER)"
rm -rf "$WORK/wheel-dry-run"

# -- 3. the JVM connector's jar -----------------------------------------------------
step "JVM connector jar (the wheel's zig)"
(
    # shellcheck disable=SC1090
    . "$CARGO_ENV"
    unset RECORD_CARGO_ENV
    PATH=${PATH#"$SHIM:"}   # the real cargo
    [ "$(command -v cargo)" = "$REAL_CARGO" ] || die "cargo is not $REAL_CARGO"
    cd "$ROOT"
    SPARK_JARS=$SPARK_JARS bash scripts/build-jar.sh --manylinux
) || die "the JVM connector's jar (scripts/build-jar.sh --manylinux, above; it needs a JDK 17): \
a release wheel is not built without it"
[ -f "$JAR" ] || die "$JAR was not built"

# -- 4. build -----------------------------------------------------------------------
step "release wheel (zig, manylinux2014), with the jar"
rm -rf "$OUT"
mkdir -p "$OUT"
maturin build "${WHEEL_ARGS[@]}" --out "$OUT"
step "sdist"
maturin sdist --out "$OUT"

shopt -s nullglob
wheels=("$OUT"/*.whl)
sdists=("$OUT"/*.tar.gz)
shopt -u nullglob
[ ${#wheels[@]} -eq 1 ] || die "expected one wheel in $OUT, found ${#wheels[@]}"
[ ${#sdists[@]} -eq 1 ] || die "expected one sdist in $OUT, found ${#sdists[@]}"
WHEEL=${wheels[0]}
SDIST=${sdists[0]}

# -- 5. static checks ---------------------------------------------------------------
step "check wheel and sdist"
python3 scripts/check_dist.py wheel "$WHEEL" || die "wheel checks (above)"
python3 scripts/check_dist.py sdist "$SDIST" || die "sdist checks (above)"
twine check --strict "$WHEEL" "$SDIST" || die "twine check"

# -- 6. the wheel without Rust ------------------------------------------------------
# PATH without any directory holding cargo or rustc (rustup's ~/.cargo/bin).
NORUST_PATH=
IFS=: read -r -a dirs <<<"$ORIG_PATH"
for d in "${dirs[@]}"; do
    [ -n "$d" ] || continue
    if [ -e "$d/cargo" ] || [ -e "$d/rustc" ]; then continue; fi
    NORUST_PATH=${NORUST_PATH:+$NORUST_PATH:}$d
done
norust() {
    env PATH="$NORUST_PATH" CARGO_HOME=/nonexistent RUSTUP_HOME=/nonexistent \
        MATURIN_NO_INSTALL_RUST=1 "$@"
}
norust bash -c '! command -v cargo && ! command -v rustc' >/dev/null ||
    die "cargo or rustc still reachable with PATH=$NORUST_PATH"

# Everything runs from a scratch directory: nothing imports from the tree.
SCRATCH=$WORK/scratch
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH"
smoke() { # venv-dir label [1: the JVM connector must be there]
    local v=$1
    (
        cd "$SCRATCH"
        norust "$v/bin/pip" check
        norust "$v/bin/rocketstore" --version
        norust "$v/bin/rocketstore" demo
        norust env ROCKETSTORE_SMOKE_JVM="${3:-0}" "$v/bin/python" "$ROOT/scripts/smoke_test.py"
    ) || die "smoke test of $2"
}

# The interpreter `python3.X` on PATH, else one of pyenv's (its shims only run
# the versions selected for the directory); empty if there is none.
find_python() {
    local name=$1 cand
    if "$name" -c '' 2>/dev/null; then
        command -v "$name"
        return
    fi
    if command -v pyenv >/dev/null; then
        for cand in "$(pyenv root)"/versions/"${name#python}".*/bin/"$name"; do
            if [ -x "$cand" ] && "$cand" -c '' 2>/dev/null; then
                echo "$cand"
                return
            fi
        done
    fi
}

tested=()
for name in python3.11 python3.12 python3.13; do
    py=$(find_python "$name")
    if [ -z "$py" ]; then
        [ "$name" != python3.11 ] || die "python3.11 is needed to test the wheel"
        echo "($name not on this machine: the abi3 wheel is not tried on it)"
        continue
    fi
    step "wheel on $name without Rust"
    V=$WORK/venv-wheel-$name
    rm -rf "$V"
    norust "$py" -m venv "$V"
    norust "$V/bin/pip" install -q --only-binary=:all: "$WHEEL" ||
        die "pip install of the wheel on $name"
    smoke "$V" "the wheel on $name" 1
    tested+=("$("$V/bin/python" -c 'import platform; print(platform.python_version())')")
done
py=$(find_python python3.10)
if [ -n "$py" ]; then
    step "wheel refused by python3.10"
    V=$WORK/venv-wheel-python3.10
    rm -rf "$V"
    "$py" -m venv "$V"
    if "$V/bin/pip" install -q --only-binary=:all: "$WHEEL" 2>"$WORK/py310.err"; then
        die "python3.10 installed a wheel that needs >= 3.11"
    fi
    echo "refused as expected: $(tail -1 "$WORK/py310.err")"
fi

# -- 7. the sdist, built from scratch -----------------------------------------------
step "sdist built in a fresh venv (with Rust)"
V=$WORK/venv-sdist
rm -rf "$V"
"$PY" -m venv "$V"
# The project's target dir: the release dependencies built by the editable
# install are reused, while the crate itself is compiled from the unpacked
# sdist's own sources (a different path for cargo), so a file missing from
# the sdist still fails the build.
env PATH="$ORIG_PATH" CARGO_TARGET_DIR="$ROOT/target" \
    "$V/bin/pip" install -q --no-binary=rocketstore "$SDIST" || die "building the sdist"
smoke "$V" "the wheel built from the sdist"

step "done"
echo "build-dist: OK in $((SECONDS - T0)) s"
printf '%s\n' "${TIMES[@]}"
echo "wheel: $(basename "$WHEEL") ($(du -k "$WHEEL" | cut -f1) KiB), tried on CPython ${tested[*]}"
echo "sdist: $(basename "$SDIST") ($(du -k "$SDIST" | cut -f1) KiB)"
