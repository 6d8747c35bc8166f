# Set-up steps shared by scripts/test.sh and scripts/powercut-test.sh (sourced, not run).
# The caller defines `say MESSAGE` and sets REQUIREMENTS (pip file) and VENV (venv path).

setup_fail() { echo "setup: $*" >&2; return 1; }

as_root() {
    if [[ $(id -u) == 0 ]]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        setup_fail "need root to run: $*"
    fi
}

apt_updated=0
apt_install() {
    command -v apt-get >/dev/null || { setup_fail "missing $*, and no apt-get to install it"; return 1; }
    if [[ $apt_updated == 0 ]]; then
        as_root apt-get update -qq || { setup_fail "apt-get update failed"; return 1; }
        apt_updated=1
    fi
    say "installing $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null \
        || { setup_fail "apt-get install $* failed"; return 1; }
}

# The venv both scripts share, rebuilt only when the requirements file changes (its hash is
# kept beside it), so neither script rebuilds the other's.
ensure_venv() {
    local python=${PYTHON:-}
    [[ -n $python ]] || python=$(command -v python3.11 || command -v python3 || true)
    if [[ -z $python ]]; then
        apt_install python3 python3-venv || return 1
        python=$(command -v python3)
    fi
    if ! "$python" -c 'import venv, ensurepip' 2>/dev/null; then
        apt_install python3-venv || return 1
    fi
    local want have=""
    want=$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)
    [[ -f $VENV/.requirements.sha256 ]] && have=$(cat "$VENV/.requirements.sha256")
    if [[ ! -x $VENV/bin/python || $want != "$have" ]]; then
        say "python venv in $VENV"
        rm -rf "$VENV"
        "$python" -m venv "$VENV"
        "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REQUIREMENTS"
        echo "$want" >"$VENV/.requirements.sha256"
    fi
}
