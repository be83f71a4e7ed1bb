#!/usr/bin/env bash
# bench/peers/setup_env.sh: create .bench-venv/ (git-ignored) with the peer queues and the chart library.
#
# The peers are benchmark-only: they are never duecast dependencies and never enter .venv.
# Idempotent: re-running upgrades nothing that already satisfies the pins below.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
VENV="${BENCH_VENV:-$ROOT/.bench-venv}"

find_python() {
    local cand
    for cand in python3.11 python3.12 python3.13 python3; do
        command -v "$cand" >/dev/null 2>&1 || continue
        if "$cand" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; then
            echo "$cand"
            return 0
        fi
    done
    return 1
}

if [[ ! -x "$VENV/bin/python" ]]; then
    py="$(find_python)" || { echo "setup_env: need Python 3.11+" >&2; exit 1; }
    "$py" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    'celery[redis]>=5.4,<6' \
    'rq>=2.0,<3' \
    'dramatiq[redis]>=1.17,<3' \
    'redis>=5' 'hiredis>=2.3' 'PyMySQL>=1.1' \
    'matplotlib>=3.8' 'rich>=13'
"$VENV/bin/python" - <<'PY'
from importlib.metadata import version
print("bench env:", ", ".join(f"{p} {version(p)}" for p in ("celery", "kombu", "rq", "dramatiq", "redis", "hiredis", "PyMySQL", "matplotlib")))
PY
