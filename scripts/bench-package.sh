#!/usr/bin/env bash
# Figures of the Debian package (docs/benchmarks.md): its size (compressed, installed), the time
# from `dpkg -i` to a ready service, and the service's start time on the packaged runtime.
#
#   sudo scripts/bench-package.sh packages/hookrelay_0.1.0_amd64.deb [RUNS]
#
# Each run installs the package on a machine without hookrelay, starts the unit's command as the
# hookrelay user (as systemd would; no systemd needed), waits for /readyz 200, and purges it all
# again (package, /etc/hookrelay, /var/lib/hookrelay, the user). Prints each run and the medians.
# Root only, on a machine with no hookrelay install: it refuses otherwise.
set -euo pipefail
deb=${1:?usage: scripts/bench-package.sh DEB [RUNS]}
runs=${2:-5}
port=18089
[[ $(id -u) == 0 ]] || { echo "bench-package.sh: run as root" >&2; exit 2; }
if dpkg -s hookrelay >/dev/null 2>&1 || [[ -e /var/lib/hookrelay || -e /etc/hookrelay ]] || id hookrelay >/dev/null 2>&1; then
  echo "bench-package.sh: this machine has a hookrelay install; it would be removed. Run it on a clean machine." >&2
  exit 2
fi

now_ms() { date +%s%3N; }
wait_ready() {
  until curl -sf -o /dev/null "http://127.0.0.1:$port/readyz"; do sleep 0.01; done
}
cleanup() {
  pkill -KILL -f '/usr/lib/hookrelay/dist/cli.js serve' 2>/dev/null || true
  dpkg --purge hookrelay >/dev/null 2>&1 || true
  rm -rf /var/lib/hookrelay /etc/hookrelay
  userdel hookrelay 2>/dev/null || true
  groupdel hookrelay 2>/dev/null || true
}
trap cleanup EXIT
serve() {
  runuser -u hookrelay -- env NODE_OPTIONS="--max-semi-space-size=4 --max-old-space-size=1024" \
    /usr/bin/hookrelay serve --config /etc/hookrelay/hookrelay.json --state-dir /var/lib/hookrelay --listen "127.0.0.1:$port" >/dev/null 2>&1 &
  echo $!
}
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

printf 'package: %s, %s bytes compressed (%s)\n' "$deb" "$(stat -c %s "$deb")" "$(du -h "$deb" | cut -f1)"
printf 'installed size (Installed-Size): %s KiB\n' "$(dpkg-deb -f "$deb" Installed-Size)"
installs=() starts=()
for ((i = 1; i <= runs; i++)); do
  cleanup
  sync
  t0=$(now_ms)
  dpkg -i "$deb" >/dev/null
  t1=$(now_ms)
  pid=$(serve)
  wait_ready
  t2=$(now_ms)
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  # The start alone, with the package installed and its database made.
  t3=$(now_ms)
  pid=$(serve)
  wait_ready
  t4=$(now_ms)
  kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
  printf 'run %d: dpkg -i %d ms, dpkg -i to ready %d ms; start to ready (installed) %d ms\n' "$i" $((t1 - t0)) $((t2 - t0)) $((t4 - t3))
  installs+=($((t2 - t0)))
  starts+=($((t4 - t3)))
done
printf 'median over %d runs: dpkg -i to ready %s ms; start to ready %s ms\n' "$runs" "$(printf '%s\n' "${installs[@]}" | median)" "$(printf '%s\n' "${starts[@]}" | median)"
