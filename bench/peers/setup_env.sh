#!/usr/bin/env bash
# bench/peers/setup_env.sh: create .bench-venv/ and .bench-venv-arq/ (git-ignored) with the peer queues and
# the chart library.
#
# The peers are benchmark-only: they are never duecast dependencies and never enter .venv. arq gets a venv
# of its own: it requires redis<6, while kombu 5.7 (Celery's transport) requires redis>=6.4.
# Idempotent: re-running upgrades nothing that already satisfies the pins below.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
VENV="${BENCH_VENV:-$ROOT/.bench-venv}"
ARQ_VENV="${BENCH_ARQ_VENV:-$ROOT/.bench-venv-arq}"

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

make_venv() {
    [[ -x "$1/bin/python" ]] && return 0
    local py
    py="$(find_python)" || { echo "setup_env: need Python 3.11+" >&2; exit 1; }
    "$py" -m venv "$1"
}

make_venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    'celery[redis,gevent]>=5.4,<6' \
    'rq>=2.0,<3' \
    'dramatiq[redis,gevent]>=1.17,<3' \
    'redis>=5' 'hiredis>=2.3' 'PyMySQL>=1.1' \
    'matplotlib>=3.8' 'rich>=13'
make_venv "$ARQ_VENV"
"$ARQ_VENV/bin/python" -m pip install -q --disable-pip-version-check 'arq>=0.26,<1' 'hiredis>=2.3'
report='from importlib.metadata import version as v; import sys; print(sys.argv[1], ", ".join(f"{p} {v(p)}" for p in sys.argv[2:]))'
"$VENV/bin/python" -c "$report" "bench env:" celery kombu gevent rq dramatiq redis hiredis PyMySQL matplotlib
"$ARQ_VENV/bin/python" -c "$report" "arq env:" arq redis hiredis
