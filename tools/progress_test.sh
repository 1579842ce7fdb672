#!/usr/bin/env bash
# The CLI's progress bars and Ctrl-C: bench, verify, ls, gc and clear draw a bar (with rate
# and ETA where the total is known) on stderr when it is a terminal (here a pseudo-terminal
# from script(1)), none when it is piped or with --quiet; SIGINT stops them cleanly with
# exit status 130 and the counts so far, and bench removes its pages.
#   progress_test.sh KVTIER_BINARY
set -euo pipefail
set -m  # background jobs keep SIGINT (a shell without job control makes them ignore it)
kvtier=$1
scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-progress-test.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v script >/dev/null || { echo "SKIP: no script(1) (util-linux)"; exit 77; }

# Runs a command with a pseudo-terminal for stdin, stdout and stderr; prints what it wrote.
on_tty() { script -qec "$*" /dev/null; }
has_bar() {  # has_bar TEXT LABEL: a bar with a total, a rate and an ETA
  grep -qE "$2 +\[#* *\] [0-9]+/[0-9]+ +[0-9]+%  [0-9.]+k? pages/s  ETA [0-9]+:[0-9]{2}" <<<"$1"
}
pages_of() { "$kvtier" stat "$1" --json | /usr/bin/python3 -c 'import json, sys; j = json.load(sys.stdin); print(j["pages"], j["temp_files"])'; }

# bench on a terminal: write and read bars; --quiet: none; piped: none.
out=$(on_tty "$kvtier" bench --dir "$scratch/b" --pages 64 --page-bytes 65536 --batch 4)
has_bar "$out" write || fail "bench on a terminal drew no write bar: $out"
has_bar "$out" read || fail "bench on a terminal drew no read bar"
grep -q 'verified yes' <<<"$out" || fail "bench on a terminal did not verify"
out=$(on_tty "$kvtier" bench --dir "$scratch/b" --pages 64 --page-bytes 65536 --batch 4 --quiet)
grep -q 'verified yes' <<<"$out" || fail "bench --quiet did not run"
grep -qE 'ETA|\[#* *\]' <<<"$out" && fail "bench --quiet drew a bar"
"$kvtier" bench --dir "$scratch/b" --pages 64 --page-bytes 65536 --batch 4 2>"$scratch/err" |
  cat >"$scratch/out"
grep -q 'verified yes' "$scratch/out" || fail "piped bench did not run"
[ ! -s "$scratch/err" ] || fail "piped bench wrote to stderr: $(cat -v "$scratch/err")"

# A store to inspect: 20,000 small pages.
store=$scratch/s
"$kvtier" bench --dir "$store" --pages 20000 --page-bytes 4096 --batch 64 --keep --quiet >/dev/null
[ "$(pages_of "$store")" = "20000 0" ] || fail "bench --keep left $(pages_of "$store")"
ns=$("$kvtier" stat "$store" --json | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["namespaces"][0]["id"])')

out=$(on_tty "$kvtier" verify "$store")
has_bar "$out" verify || fail "verify on a terminal drew no bar: $(cat -v <<<"$out" | head -c 400)"
grep -q '20000 pages checked, 20000 intact' <<<"$out" || fail "verify on a terminal"
out=$(on_tty "$kvtier" ls "$store" --json)
grep -qE 'listing [0-9]+ pages  [0-9.]+k? pages/s' <<<"$out" || fail "ls on a terminal drew no count"
for cmd in "verify $store" "ls $store" "verify $store --quiet"; do
  # shellcheck disable=SC2086
  "$kvtier" $cmd 2>"$scratch/err" >/dev/null
  [ ! -s "$scratch/err" ] || fail "piped '$cmd' wrote to stderr: $(cat -v "$scratch/err" | head -c 300)"
done
out=$(on_tty "$kvtier" ls "$store" --quiet --json)
grep -q 'pages/s' <<<"$out" && fail "ls --quiet drew a count"

# SIGINT at DELAY seconds into COMMAND: the output, and the exit status in $rc. A run that
# ended before the signal, or got it before it could catch it, is told apart from a stop.
interrupt_after() {
  local delay=$1
  shift
  "$@" >"$scratch/out" 2>"$scratch/err" &
  local pid=$!
  sleep "$delay"
  kill -INT "$pid" 2>/dev/null || true
  rc=0
  wait "$pid" || rc=$?
}
# Retries with a longer delay when the signal came too early: before the command could catch
# it, or (gc, clear) while it was still listing, which stops it with nothing removed; with a
# shorter one when it ended first (a verify; gc and clear cannot be run again).
interrupt_during() {
  local want=$1 delay=0.15
  shift
  for _ in 1 2 3 4 5 6 7 8; do
    interrupt_after "$delay" "$@"
    if [ "$rc" = 130 ] && grep -qE "$want" "$scratch/err"; then return 0; fi
    if [ "$rc" = 0 ] && [ "$2" = verify ]; then
      delay=$(/usr/bin/python3 -c "print($delay / 2)")
    elif [ "$rc" = 0 ]; then
      fail "'$*' ended before the signal"
    else
      delay=$(/usr/bin/python3 -c "print($delay * 2)")
    fi
  done
  fail "could not interrupt '$*' while it ran (last exit $rc: $(cat "$scratch/err"))"
}

# verify: stops with the counts so far.
interrupt_during "pages checked" "$kvtier" verify "$store"
grep -qE 'kvtier verify: interrupted: [0-9]+ pages checked' "$scratch/err" || fail "verify: $(cat "$scratch/err")"
checked=$(sed -nE 's/.*interrupted: ([0-9]+) pages checked.*/\1/p' "$scratch/err")
[ "$checked" -lt 20000 ] || fail "verify was not stopped early ($checked pages)"

# gc: stops between groups; what it says it removed is exactly what is gone.
interrupt_during "removed [0-9]+ of" "$kvtier" gc "$store" --to 0
removed=$(sed -nE 's/.*interrupted: removed ([0-9]+) of 20000 pages.*/\1/p' "$scratch/err")
[ -n "$removed" ] || fail "gc: $(cat "$scratch/err")"
[ "$(pages_of "$store")" = "$((20000 - removed)) 0" ] || fail "gc removed $removed but $(pages_of "$store") remain"
left=$((20000 - removed))
[ "$left" -gt 0 ] || fail "gc was not stopped early"

# clear: the same, by namespace, on the store filled up again.
"$kvtier" bench --dir "$store" --pages 20000 --page-bytes 4096 --batch 64 --keep --quiet >/dev/null
[ "$(pages_of "$store")" = "20000 0" ] || fail "bench --keep left $(pages_of "$store")"
interrupt_during "removed [0-9]+ of" "$kvtier" clear "$store" --namespace "$ns"
removed=$(sed -nE "s/.*interrupted: namespace $ns: removed ([0-9]+) of 20000 pages.*/\1/p" "$scratch/err")
[ -n "$removed" ] || fail "clear: $(cat "$scratch/err")"
[ "$(pages_of "$store")" = "$((20000 - removed)) 0" ] || fail "clear removed $removed but $(pages_of "$store") remain"
[ "$removed" -lt 20000 ] || fail "clear was not stopped early"

# bench: a long run stopped once it has written pages: exit 130, the counts, and its pages
# and temporaries gone.
"$kvtier" bench --dir "$scratch/long" --pages 1000000 --page-bytes 4096 --batch 64 \
  >"$scratch/out" 2>"$scratch/err" &
pid=$!
for _ in $(seq 100); do
  [ -n "$(find "$scratch/long" -type f -name '[0-9a-f]*' -size +0 2>/dev/null | head -n1)" ] && break
  sleep 0.1
done
kill -INT "$pid"
rc=0
wait "$pid" || rc=$?
[ "$rc" = 130 ] || fail "bench stopped by SIGINT exited $rc: $(cat "$scratch/err")"
grep -qE 'kvtier bench: interrupted: [0-9]+ of 1000000 pages written, 0 read, 0 checked; pages cleared' \
  "$scratch/err" || fail "bench: $(cat "$scratch/err")"
written=$(sed -nE 's/.*interrupted: ([0-9]+) of.*/\1/p' "$scratch/err")
[ "$written" -gt 0 ] && [ "$written" -lt 1000000 ] || fail "bench wrote $written pages"
[ "$(pages_of "$scratch/long")" = "0 0" ] || fail "bench left $(pages_of "$scratch/long") pages and temporaries"
echo "PASS"
