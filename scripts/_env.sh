# Shared setup, sourced by scripts/*: cd to the repo root, make .venv and install the package
# (march_venv), and install redis-server/redis-cli/redis-benchmark if missing (march_redis_tools).
# Idempotent and quiet: a second run with an unchanged pyproject.toml installs nothing.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

march_venv() {
    if [ ! -x "$PY" ]; then
        echo "scripts: creating $VENV" >&2
        "${PYTHON:-python3}" -m venv "$VENV"
    fi
    # Reinstall only when pyproject.toml changed (new dependency, new entry point) or march is not importable.
    local stamp="$VENV/.march-installed" want
    want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
    if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! (cd / && "$PY" -c 'import march') 2>/dev/null; then
        echo "scripts: installing march and its test/dev dependencies into .venv" >&2
        "$PY" -m pip install -q -e '.[test,dev]'
        echo "$want" >"$stamp"
    fi
}

march_redis_tools() {
    local missing=0 bin
    for bin in redis-server redis-cli redis-benchmark; do
        command -v "$bin" >/dev/null 2>&1 || missing=1
    done
    [ "$missing" = 0 ] && return 0
    echo "scripts: installing redis-server and redis-tools (apt)" >&2
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq redis-tools redis-server >/dev/null
}
