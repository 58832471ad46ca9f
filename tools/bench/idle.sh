# Sourced by the benchmark scripts: how they tell whether the machine is quiet enough to measure.
# A ratio measured beside a compiler is void, so every script checks the same way.

# busy: true while a compiler process (rustc, cargo, cc1plus, clippy-driver) is running.
busy() {
  local n
  for n in rustc cargo cc1plus clippy-driver; do pgrep "$n" >/dev/null && return 0; done
  return 1
}

# wait_idle: wait until no compiler has run for IDLE_QUIET_S seconds and the 1-minute load average
# is below IDLE_LOAD, at most IDLE_MAX_WAIT_S seconds (then say so and measure anyway).
wait_idle() {
  local waited=0 quiet=0
  while [ "$waited" -lt "$IDLE_MAX_WAIT_S" ]; do
    if busy; then quiet=0; else quiet=$((quiet + 1)); fi
    if [ "$quiet" -ge "$IDLE_QUIET_S" ] && awk -v l="$(cut -d' ' -f1 /proc/loadavg)" -v m="$IDLE_LOAD" 'BEGIN { exit !(l < m) }'; then
      echo "idle after ${waited} s (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2; return 0
    fi
    sleep 1; waited=$((waited + 1))
  done
  echo "NOT idle after ${waited} s (load $(cut -d' ' -f1-3 /proc/loadavg)); measuring anyway" >&2
}

# run_sampled NAME CMD...: runs CMD with stdout -> $OUT/NAME.json and stderr -> $OUT/NAME.stderr,
# while a sampler writes once a second whether a compiler runs (1) or not (0) to
# $OUT/NAME.contention; sets LOADAVG_START and LOADAVG_END (1-minute); returns CMD's status.
run_sampled() {
  local name="$1"; shift
  local marks="$OUT/$name.contention"
  : > "$marks"
  ( while :; do if busy; then echo 1; else echo 0; fi; sleep 1; done >> "$marks" ) &
  local sampler=$!
  LOADAVG_START="$(cut -d' ' -f1 /proc/loadavg)"
  local rc=0
  "$@" > "$OUT/$name.json" 2> "$OUT/$name.stderr" || rc=$?
  kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null || true
  LOADAVG_END="$(cut -d' ' -f1 /proc/loadavg)"
  return "$rc"
}
