#!/usr/bin/env bash
# Every benchmark in docs/benchmarks.md, one after the other (about an hour on 2 cores).
# Results land in bench/results/*.json (git-ignored) and charts in docs/img/*.png.
# Run it on an otherwise idle machine: the figures are only as quiet as the machine.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=bench/results
img=docs/img
mkdir -p "$out" "$img"
run() { echo "+ $*" >&2; scripts/dev shell python "$@"; }

run bench/rescan.py --users 1000000 --seconds 60 --runs 3 --json "$out/rescan.json" --chart "$img/rescan.png"
# The ceiling: twice the demand (every user every 5 s), so the rate is what the machine can do.
run bench/rescan.py --users 1000000 --seconds 40 --runs 3 --modes ranges --period 5 --json "$out/rescan-ceiling.json"
run bench/scaling.py --json "$out/scaling.json" --chart "$img/scaling.png"
run bench/jobs.py --json "$out/jobs.json"
run bench/interrupted.py --json "$out/interrupted.json"
run bench/task_limits.py --json "$out/task-limits.json"
run bench/latency.py --rates 100 1000 2000 --json "$out/latency.json" --chart "$img/latency.png"
bash bench/peers/setup_env.sh
run bench/peers/run.py --jobs 100000 --runs 3 --json "$out/peers.json" --chart "$img/peers.png"
# Checks that wait on I/O (async handlers): the re-scan, a real HTTP call per check, one-off jobs vs peers.
run bench/io_checks/io_rescan.py --runs 3 --json "$out/io-rescan.json"
run bench/io_checks/http_check.py --runs 3 --compare --json "$out/http-check.json"
run bench/peers/run.py --workload io --runs 3 --json "$out/peers-io.json" --chart "$img/peers-io.png"
run bench/soak.py --json "$out/soak.json" --chart "$img/soak.png"
