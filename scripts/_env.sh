# Shared setup, sourced by scripts/*: cd to the repo root, make .venv and install the package
# (march_venv, with the Python client in clients/python), and install redis-server/redis-cli/redis-benchmark
# (march_redis_tools), PostgreSQL (march_postgres, for the client's ORM tests), Node.js with npm
# (march_node, for the Node client examples), the Go, Ruby, PHP and C Redis clients (march_clients, for
# the docs/clients programs) and Prometheus with promtool (march_prometheus, for tests/monitoring) if missing.
# Idempotent and quiet: a second run with unchanged pyproject.toml files installs nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

_apt_install() {
    # apt-get install "$@" quietly (as root, or through sudo without a password prompt), after an update.
    echo "scripts: installing $* (apt)" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "$@" >/dev/null
}

march_venv() {
    if [ ! -x "$PY" ]; then
        echo "scripts: creating $VENV" >&2
        "${PYTHON:-python3}" -m venv "$VENV"
    fi
    # Reinstall only when a pyproject.toml changed (new dependency, new entry point) or march or the
    # Python client (clients/python, editable) is not importable.
    local stamp="$VENV/.march-installed" want
    want="$(cat pyproject.toml clients/python/pyproject.toml | sha256sum | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! (cd / && "$PY" -c 'import march, march_client') 2>/dev/null; then
        echo "scripts: installing march, its test/dev dependencies and clients/python into .venv" >&2
        "$PY" -m pip install -q -e '.[test,dev]'
        "$PY" -m pip install -q -e 'clients/python[test]'
        echo "$want" >"$stamp"
    fi
}

march_postgres() {
    # PostgreSQL server binaries (initdb, postgres) for the client's ORM tests, which start their own
    # throwaway cluster; the apt package puts them under /usr/lib/postgresql/<version>/bin.
    if compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
        return 0
    fi
    _apt_install postgresql
}

march_node() {
    # Node.js and npm for the Node client examples (docs/clients/node), which the tests run against
    # a real cluster after installing ioredis and node-redis with npm into a temporary directory.
    if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
        return 0
    fi
    _apt_install nodejs npm
}

march_clients() {
    # Debian's Redis clients that tests/cluster/test_clients.py runs the docs/clients programs with:
    # Go (redigo, redisc, FZambia/sentinel: sources under /usr/share/gocode, built in GOPATH mode, as no
    # module proxy is reachable), Ruby (redis-rb 4.8), PHP (phpredis) and C (hiredis). Only what is missing.
    local want=(golang-go golang-github-gomodule-redigo-dev golang-github-mna-redisc-dev
        golang-github-fzambia-sentinel-dev ruby ruby-redis php-cli php-redis libhiredis-dev gcc pkg-config)
    local missing=() pkg
    for pkg in "${want[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
    done
    [ "${#missing[@]}" = 0 ] && return 0
    _apt_install --no-install-recommends "${missing[@]}"
}

march_redis_tools() {
    local missing=0 bin
    for bin in redis-server redis-cli redis-benchmark; do
        command -v "$bin" >/dev/null 2>&1 || missing=1
    done
    [ "$missing" = 0 ] && return 0
    _apt_install redis-tools redis-server
}

march_prometheus() {
    # Debian's prometheus (the server and promtool) for tests/monitoring: the rules' unit tests and a
    # real Prometheus scraping a test cluster. Without recommends: no node exporter, no web assets.
    # The package's own service is not started in containers without systemd, and is never used.
    if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
        return 0
    fi
    _apt_install --no-install-recommends prometheus
}
