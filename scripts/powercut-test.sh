#!/usr/bin/env bash
# Whole-binary power-cut test: the real `queen` runs with its data dir on powerfs,
# a FUSE filesystem that keeps only what POSIX makes durable (file data on fsync
# of the file, names on fsync of their directory), and the power is cut at random
# moments under pushes, pops and acks (tests/powercut/test_powercut.py).
#
#   ./scripts/powercut-test.sh          (after `cargo build --release`)
#
# - Installs what is missing: Debian's fuse3, libfuse3-dev and pkg-config (one
#   apt-get update), the repo's .venv from scripts/lib/requirements.txt (as
#   scripts/test.sh makes it) and pyfuse3 from tests/powercut/requirements.txt,
#   built against libfuse3-dev.
# - Where FUSE cannot mount (no /dev/fuse, a container without the right), the
#   test is reported as skipped with the reason, not failed.
# - JUnit report: .cache/test-results/powercut.xml. Bounded: pytest gets
#   $POWERCUT_TIMEOUT_SECS (default 290) in all, the test itself 270 s.
# Binary: $QUEEN_BIN, else ${CARGO_TARGET_DIR:-target}/release/queen.
# Python: $VENV (default .venv of the repo), created with $PYTHON or python3.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
REPO=$PWD
export QUEEN_BIN=${QUEEN_BIN:-${CARGO_TARGET_DIR:-$REPO/target}/release/queen}
VENV=${VENV:-$REPO/.venv}
REQUIREMENTS=$REPO/scripts/lib/requirements.txt
FUSE_REQUIREMENTS=$REPO/tests/powercut/requirements.txt
RESULTS=$REPO/.cache/test-results
TIMEOUT_SECS=${POWERCUT_TIMEOUT_SECS:-290}
BASETEMP=$REPO/.cache/powercut-tmp

say() { printf 'powercut-test: %s\n' "$*"; }
die() { say "FAIL: $*" >&2; exit 1; }

# shellcheck source=lib/setup.sh
. "$REPO/scripts/lib/setup.sh"

# A killed run leaves its powerfs mounts dead ("transport endpoint is not
# connected"): detach every one under our temp dir, before and after a run.
unmount_leftovers() {
    local point
    while read -r _ point _; do
        if [[ $point == "$BASETEMP"/* ]]; then
            fusermount3 -u -z "$point" 2>/dev/null || umount -l "$point" 2>/dev/null || true
        fi
    done </proc/self/mounts
}
trap unmount_leftovers EXIT

fuse_device_usable() {
    [[ -c /dev/fuse && -r /dev/fuse && -w /dev/fuse ]]
}

install_fuse() {
    local missing=()
    command -v fusermount3 >/dev/null || missing+=(fuse3)
    command -v pkg-config >/dev/null || missing+=(pkg-config)
    command -v cc >/dev/null || missing+=(build-essential)
    if ! pkg-config --exists fuse3 2>/dev/null; then missing+=(libfuse3-dev); fi
    if [[ ${#missing[@]} -gt 0 ]]; then apt_install "${missing[@]}"; fi
}

install_pyfuse3() {
    if "$VENV/bin/python" -c 'import pyfuse3, trio' 2>/dev/null; then return 0; fi
    # pyfuse3 is built from source: it needs the interpreter's C headers.
    local include
    include=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
    if [[ ! -f $include/Python.h ]]; then apt_install python3-dev; fi
    say "building pyfuse3 against libfuse3 ($(pkg-config --modversion fuse3))"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$FUSE_REQUIREMENTS" \
        || die "pip could not install $FUSE_REQUIREMENTS"
}

[[ -x $QUEEN_BIN ]] || die "queen binary not found at $QUEEN_BIN (cargo build --release -p queenmq-broker, or set QUEEN_BIN)"
ensure_venv || die "python venv"
if fuse_device_usable; then
    install_fuse
    install_pyfuse3
else
    say "/dev/fuse is missing or not usable here: the test will be reported as skipped"
fi
say "install done after $SECONDS s; binary $QUEEN_BIN"

unmount_leftovers
mkdir -p "$RESULTS"
started=$SECONDS
code=0
timeout --kill-after=10 "$TIMEOUT_SECS" "$VENV/bin/python" -m pytest -p no:cacheprovider -rfEsP --tb=short \
    --basetemp="$BASETEMP" --junitxml="$RESULTS/powercut.xml" tests/powercut || code=$?
say "pytest tests/powercut: $((SECONDS - started)) s, exit $code (total $SECONDS s)"
if [[ $code == 124 || $code == 137 ]]; then die "timed out after $TIMEOUT_SECS s"; fi
# pytest exits 5 when it collected nothing: that is a failure here too.
exit "$code"
