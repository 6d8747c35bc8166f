#!/usr/bin/env bash
# Builds librdkafka 2.12.1 and its own integration test suite from the source that ships in
# the crate rdkafka-sys 4.10.0+2.12.1 (spec/kafka-port.md), into .cache/librdkafka (ignored by
# git; nothing of it is committed). Prints the path of the built tests/ folder on its last line.
# A second run reuses the build.
#
#   ./scripts/librdkafka-build.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
CACHE=$REPO/.cache/librdkafka
CRATE=rdkafka-sys-4.10.0+2.12.1
URL=https://static.crates.io/crates/rdkafka-sys/$CRATE.crate
SHA256=e234cf318915c1059d4921ef7f75616b5219b10b46e9f3a511a15eb4b56a3f77
SRC=$CACHE/$CRATE/librdkafka

say() { printf '==> %s\n' "$*" >&2; }
# shellcheck source=lib/setup.sh
. "$REPO/scripts/lib/setup.sh"

if [[ -x $SRC/tests/test-runner && -f $SRC/tests/.built-by-queen ]]; then
    echo "$SRC/tests"
    exit 0
fi

# zstd and zlib so that every codec is built in; librdkafka bundles lz4 and snappy.
missing=()
for pkg in build-essential zlib1g-dev libzstd-dev pkg-config python3; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then apt_install "${missing[@]}"; fi

mkdir -p "$CACHE"
if [[ ! -f $CACHE/$CRATE.crate ]] || ! echo "$SHA256  $CACHE/$CRATE.crate" | sha256sum -c --quiet; then
    say "downloading $CRATE"
    curl -fsSL --retry 3 -o "$CACHE/$CRATE.crate.part" "$URL"
    echo "$SHA256  $CACHE/$CRATE.crate.part" | sha256sum -c --quiet
    mv "$CACHE/$CRATE.crate.part" "$CACHE/$CRATE.crate"
fi
rm -rf "${CACHE:?}/$CRATE"
tar xzf "$CACHE/$CRATE.crate" -C "$CACHE"

say "building librdkafka and its tests (3 to 5 minutes on 2 cores)"
cd "$SRC"
./configure --disable-ssl --disable-gssapi --disable-sasl >"$CACHE/configure.log" 2>&1 \
    || { tail -20 "$CACHE/configure.log" >&2; exit 1; }
grep -q ZSTD "$CACHE/configure.log" || { echo "librdkafka-build: configure found no zstd" >&2; exit 1; }
make -j2 libs >"$CACHE/make.log" 2>&1 || { tail -30 "$CACHE/make.log" >&2; exit 1; }
make -j2 -C tests build >"$CACHE/make-tests.log" 2>&1 || { tail -30 "$CACHE/make-tests.log" >&2; exit 1; }
touch tests/.built-by-queen
echo "$SRC/tests"
