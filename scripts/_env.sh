# Shared setup, sourced by scripts/*: cd to the repo root, make .venv and install the package
# (march_venv, with the Python client in clients/python and the harness in harness/: what the tests and
# the scripts share, imported as march_harness), and install redis-server/redis-cli/redis-benchmark
# (march_redis_tools), PostgreSQL (march_postgres, for the client's ORM tests), Node.js with npm
# (march_node, for the Node client examples), the Go, Ruby, PHP and C Redis clients (march_clients, for
# the docs/clients programs), Prometheus with promtool (march_prometheus, for tests/monitoring) if missing,
# and the container tools tests/compose runs (march_containers: podman, podman-compose 1.0 from Debian and
# the current one from PyPI, Debian's docker-compose, and a local Debian base image built once with debootstrap).
# march_system_packages installs every apt package of those a fresh machine lacks at once (one apt-get
# update per process, whatever installs). Idempotent and quiet: a second run with unchanged pyproject.toml
# files installs nothing, and each function is then a check of well under a second.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

_APT_UPDATED=""
_apt_install() {
    # apt-get install "$@" quietly (as root, or through sudo without a password prompt), after an
    # update: one per process (a fresh machine installs in several calls; the lists stay fresh).
    echo "scripts: installing $* (apt)" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    if [ -z "$_APT_UPDATED" ]; then
        $sudo apt-get update -qq
        _APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

# What each march_<tool> below installs with apt when it is missing, one function per tool, so that
# march_system_packages can install everything a fresh machine lacks in one apt call per kind.
_missing_redis_tools() {
    local bin
    for bin in redis-server redis-cli redis-benchmark; do
        command -v "$bin" >/dev/null 2>&1 || { echo redis-tools redis-server; return 0; }
    done
}
_missing_postgres() { compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || echo postgresql; }
_missing_node() { { command -v node && command -v npm; } >/dev/null 2>&1 || echo nodejs npm; }
_missing_clients() {  # installed without recommends; one dpkg-query for all
    local want=(golang-go golang-github-gomodule-redigo-dev golang-github-mna-redisc-dev
        golang-github-fzambia-sentinel-dev ruby ruby-redis php-cli php-redis libhiredis-dev gcc pkg-config)
    local installed pkg
    installed=" $(dpkg-query -W -f='${Package}=${Status}\n' "${want[@]}" 2>/dev/null |
        awk -F= '$2 ~ /ok installed$/ {print $1}' | tr '\n' ' ')"
    for pkg in "${want[@]}"; do
        [[ "$installed" == *" $pkg "* ]] || echo "$pkg"
    done
}
_missing_prometheus() {  # installed without recommends
    { command -v prometheus && command -v promtool; } >/dev/null 2>&1 || echo prometheus
}
_missing_containers() {
    command -v podman >/dev/null 2>&1 || echo podman
    command -v podman-compose >/dev/null 2>&1 || echo podman-compose
    command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || echo runc
    command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || echo debootstrap
}
_missing_docker_compose() { command -v docker-compose >/dev/null 2>&1 || echo docker-compose; }  # no recommends

march_system_packages() {
    # Every apt package scripts/test needs and this machine lacks, in one update and two installs
    # (with and without recommends, as the march_<tool> functions would each install them).
    local with without
    read -r -a with <<<"$({
        _missing_redis_tools; _missing_postgres; _missing_node; _missing_containers
    } | tr '\n' ' ')"
    read -r -a without <<<"$({ _missing_clients; _missing_prometheus; _missing_docker_compose; } | tr '\n' ' ')"
    [ "${#with[@]}" = 0 ] || _apt_install "${with[@]}"
    [ "${#without[@]}" = 0 ] || _apt_install --no-install-recommends "${without[@]}"
}

march_venv() {
    if [ ! -x "$PY" ]; then
        echo "scripts: creating $VENV" >&2
        "${PYTHON:-python3}" -m venv "$VENV"
    fi
    # Reinstall only when a pyproject.toml changed (new dependency, new entry point) or march, the
    # Python client (clients/python) or the harness (harness/), all editable, is not importable.
    local stamp="$VENV/.march-installed" want
    want="$(cat pyproject.toml clients/python/pyproject.toml harness/pyproject.toml | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] ||
        ! (cd / && "$PY" -c 'import march, march_client, march_harness') 2>/dev/null; then
        echo "scripts: installing march, its test/dev dependencies, clients/python and harness/ into .venv" >&2
        "$PY" -m pip install -q -e '.[test,dev]'
        "$PY" -m pip install -q -e 'clients/python[test]'
        "$PY" -m pip install -q -e harness
        echo "$want" >"$stamp"
    fi
}

march_build() {
    # The compiled per-read path (docs/compiled.md): `setup.py build_ext --inplace` when its sources
    # changed since the last build or attempt (a no-op otherwise, and when the build is current). Without
    # a C compiler the attempt fails quietly and March runs as Python, which it says once at start and
    # in INFO server; scripts/build tries again. MARCH_NO_COMPILE=1 skips it.
    [ "${MARCH_NO_COMPILE:-0}" = "0" ] || return 0
    local stamp="$VENV/.march-built" want
    want="$(cd / && MARCH_PURE_PYTHON= "$PY" -c 'from march import build; print(build.fingerprint(), build.compiled)')"
    if [ "${1:-}" != "--force" ] && { [ "$(cat "$stamp" 2>/dev/null)" = "${want% *}" ] || [ "${want#* }" = True ]; }; then
        return 0
    fi
    echo "scripts: compiling the per-read path (setup.py build_ext --inplace; log in $VENV/march-build.log)" >&2
    "$PY" setup.py build_ext --inplace >"$VENV/march-build.log" 2>&1 || true
    echo "${want% *}" >"$stamp"
    (cd / && MARCH_PURE_PYTHON= "$PY" -c 'from march import build; build.compiled or print("scripts: the per-read path runs as Python:", build.reason)') >&2
}

march_postgres() {
    # PostgreSQL server binaries (initdb, postgres) for the client's ORM tests, which start their own
    # throwaway cluster; the apt package puts them under /usr/lib/postgresql/<version>/bin.
    local missing
    read -r -a missing <<<"$(_missing_postgres | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install "${missing[@]}"
}

march_node() {
    # Node.js and npm for the Node client examples (docs/clients/node), which the tests run against
    # a real cluster after installing ioredis and node-redis with npm into a temporary directory.
    local missing
    read -r -a missing <<<"$(_missing_node | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install "${missing[@]}"
}

march_clients() {
    # Debian's Redis clients that tests/clients/test_docs_clients.py runs the docs/clients programs with:
    # Go (redigo, redisc, FZambia/sentinel: sources under /usr/share/gocode, built in GOPATH mode, as no
    # module proxy is reachable), Ruby (redis-rb 4.8), PHP (phpredis) and C (hiredis). Only what is missing.
    local missing
    read -r -a missing <<<"$(_missing_clients | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install --no-install-recommends "${missing[@]}"
}

march_redis_tools() {
    local missing
    read -r -a missing <<<"$(_missing_redis_tools | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install "${missing[@]}"
}

march_prometheus() {
    # Debian's prometheus (the server and promtool) for tests/monitoring: the rules' unit tests and a
    # real Prometheus scraping a test cluster. Without recommends: no node exporter, no web assets.
    # The package's own service is not started in containers without systemd, and is never used.
    local missing
    read -r -a missing <<<"$(_missing_prometheus | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install --no-install-recommends "${missing[@]}"
}

# The container tools of tests/compose and scripts/compose-check, and what they need on a machine
# that reaches no image registry (checked on Debian 12; as root or through sudo):
# - podman, runc, debootstrap and Debian's podman-compose (1.0.3 on bookworm) from apt, and Debian's
#   docker-compose (1.29) without its recommends (it talks to podman's Docker API socket, never to a
#   Docker daemon);
# - /etc/containers/containers.conf when there is none: runc (crun refuses some hybrid cgroup
#   layouts), cgroupfs, no default ulimits (sandboxes refuse setrlimit for containers);
# - the current podman-compose from PyPI in a venv of its own, outside the clone and keyed on what
#   it is made of (the pinned version, the Python's): $MARCH_TOOLS/podman-compose-<version>-py<x.y>
#   (never in .venv/bin, where it would shadow Debian's for anyone who activates .venv), so that a
#   fresh clone on the same machine (CI) finds it made;
# - (march_base_image) the base image MARCH_LOCAL_BASE (localhost/march-base:bookworm): Debian bookworm with python3 and
#   the venv module, made with debootstrap from the mirror apt already uses and imported into podman
#   once (about a minute); podman keeps it, so the next run finds it.
MARCH_LOCAL_BASE=localhost/march-base:bookworm
# The version tests/compose runs as "the current podman-compose from PyPI" (pinned: a new release
# is taken on purpose, by changing this line, not by surprise in CI).
PODMAN_COMPOSE_PYPI_VERSION=1.6.0
MARCH_TOOLS="${MARCH_TOOLS:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/march-tools}"
PODMAN_COMPOSE_PYPI_DIR="$MARCH_TOOLS/podman-compose-$PODMAN_COMPOSE_PYPI_VERSION-py$(
    "${PYTHON:-python3}" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo unknown)"
PODMAN_COMPOSE_PYPI="$PODMAN_COMPOSE_PYPI_DIR/bin/podman-compose"

march_containers() {
    local missing
    read -r -a missing <<<"$(_missing_containers | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install "${missing[@]}"
    read -r -a missing <<<"$(_missing_docker_compose | tr '\n' ' ')"
    [ "${#missing[@]}" = 0 ] || _apt_install --no-install-recommends "${missing[@]}"
    if [ ! -e /etc/containers/containers.conf ]; then
        local sudo=""
        [ "$(id -u)" = 0 ] || sudo="sudo -n"
        echo "scripts: writing /etc/containers/containers.conf (runc, cgroupfs, no default ulimits)" >&2
        $sudo mkdir -p /etc/containers
        printf '%s\n' '[containers]' 'default_ulimits = []' 'pids_limit = 0' '[engine]' 'runtime = "runc"' \
            'cgroup_manager = "cgroupfs"' | $sudo tee /etc/containers/containers.conf >/dev/null
    fi
    _podman_compose_pypi_ok && return 0
    # Under a lock: clones on one machine share the venv, and may set up at the same time.
    mkdir -p "$MARCH_TOOLS"
    (
        flock -w 600 9 || exit 1
        _podman_compose_pypi_ok && exit 0
        local pc="$PODMAN_COMPOSE_PYPI_DIR"
        echo "scripts: installing podman-compose $PODMAN_COMPOSE_PYPI_VERSION (PyPI) into $pc" >&2
        rm -rf "$pc"
        "${PYTHON:-python3}" -m venv "$pc"
        "$pc/bin/pip" install -q --disable-pip-version-check "podman-compose==$PODMAN_COMPOSE_PYPI_VERSION"
    ) 9>"$MARCH_TOOLS/.lock"
}
_podman_compose_pypi_ok() {
    [ "$("$PODMAN_COMPOSE_PYPI" --version 2>/dev/null | awk '/podman-compose version/{print $3}')" = \
        "$PODMAN_COMPOSE_PYPI_VERSION" ]
}

march_base_image() {
    # MARCH_LOCAL_BASE, built once: debootstrap (minbase, python3, python3-venv, CA certificates) from
    # the bookworm mirror of apt's own configuration, imported into podman.
    podman image exists "$MARCH_LOCAL_BASE" && return 0
    local mirror rootfs sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    mirror="$(apt-cache policy | awk '/ bookworm\/main /{print $2; exit}')"
    if [ -z "$mirror" ]; then
        echo "scripts: no bookworm/main source in apt's configuration (apt-cache policy) to debootstrap from" >&2
        return 1
    fi
    rootfs="$(mktemp -d /tmp/march-base.XXXXXX)"
    echo "scripts: building the base image $MARCH_LOCAL_BASE with debootstrap (once, about a minute)" >&2
    if ! PATH="$PATH:/usr/sbin:/sbin" timeout 900 $sudo debootstrap --variant=minbase \
        --include=python3,python3-venv,ca-certificates bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1; then
        tail -n 20 "$rootfs.log" >&2
        $sudo rm -rf "$rootfs"
        echo "scripts: debootstrap failed (log $rootfs.log)" >&2
        return 1
    fi
    $sudo tar -C "$rootfs" -c . | timeout 300 podman import - "$MARCH_LOCAL_BASE" >>"$rootfs.log" 2>&1 || {
        $sudo rm -rf "$rootfs"
        echo "scripts: podman import of the base image failed (log $rootfs.log)" >&2
        return 1
    }
    $sudo rm -rf "$rootfs" "$rootfs.log"
}
