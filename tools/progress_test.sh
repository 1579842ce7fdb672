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
# Seconds any wait below may take: a ceiling that fails a hung command, never one that decides
# a result on a slow or loaded machine (every wait ends on an event long before it).
readonly ceiling_s=300

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
"$kvtier" bench --dir "$store" --layout files --pages 20000 --page-bytes 4096 --batch 64 --keep --quiet >/dev/null
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

# Ctrl-C is sent when the command has reached the point to interrupt, an event seen from
# outside, never after a guessed delay: a delay is too early on a loaded machine (the command
# has not caught SIGINT yet, or is still listing) and too late on a fast one.

running() {  # running PID: alive and not yet a zombie
  local st
  read -r st 2>/dev/null <"/proc/$1/stat" || return 1
  st=${st##*) }
  [[ ${st%% *} != Z ]]
}
# The command (kvtier itself, not the shell forked to start it) catches SIGINT: kvtier installs
# its handler before it touches the store.
catches_sigint() {
  local comm key mask
  read -r comm 2>/dev/null <"/proc/$pid/comm" && [ "$comm" = kvtier ] || return 1
  while read -r key mask; do
    [ "$key" = SigCgt: ] && return $(((16#$mask & 2) == 0))  # bit 2 - 1: SIGINT
  done <"/proc/$pid/status"
  return 1
}
gone() { [ ! -e "$1" ]; }
# The page gc and clear remove first (the least recently written: its group of 1000 goes
# first; the oldest time is shared by a few dozen pages at most).
oldest_page() {
  local p
  p=$(find "$1" -type f -regextype posix-extended -regex '.*/[0-9a-f]{32}' -printf '%T@ %p\n' |
    sort -n | sed -n '1s/^[^ ]* //p')
  [ -n "$p" ] || fail "no page in $1"
  echo "$p"
}
# Polls until CONDITION holds or the command ended; only the ceiling can fail it.
wait_for() {  # wait_for WHAT CONDITION...
  local what=$1 deadline=$((SECONDS + ceiling_s))
  shift
  until ! running "$pid" || "$@"; do
    ((SECONDS < deadline)) || fail "no $what within $ceiling_s s"
    sleep 0.01
  done
}
# Runs COMMAND and sends it SIGINT once CONDITION holds: its output in $scratch/out and
# $scratch/err, its exit status in $rc.
interrupt_when() {  # interrupt_when WHAT CONDITION... -- COMMAND...
  local what=$1 cond=()
  shift
  while [ "$1" != -- ]; do cond+=("$1"); shift; done
  shift
  "$@" >"$scratch/out" 2>"$scratch/err" &
  pid=$!
  wait_for "$what" "${cond[@]}"
  kill -INT "$pid" 2>/dev/null || true
  rc=0
  wait "$pid" || rc=$?
  [ "$rc" = 130 ] || fail "'$*' interrupted once $what: exit $rc: $(cat "$scratch/err")"
}

# verify: stops with the counts so far.
# Interrupted as soon as it catches SIGINT, while it lists or checks its first pages: it stops
# after the page it is checking.
interrupt_when "SIGINT handler" catches_sigint -- "$kvtier" verify "$store"
grep -qE 'kvtier verify: interrupted: [0-9]+ pages checked' "$scratch/err" || fail "verify: $(cat "$scratch/err")"
checked=$(sed -nE 's/.*interrupted: ([0-9]+) pages checked.*/\1/p' "$scratch/err")
[ "$checked" -lt 20000 ] || fail "verify was not stopped early ($checked pages)"

# gc: stops between groups; what it says it removed is exactly what is gone.
# Interrupted once its first group is gone, so past its listing, with 19 groups to go.
oldest=$(oldest_page "$store")
interrupt_when "removal" gone "$oldest" -- "$kvtier" gc "$store" --to 0
removed=$(sed -nE 's/.*interrupted: removed ([0-9]+) of 20000 pages.*/\1/p' "$scratch/err")
[ -n "$removed" ] || fail "gc: $(cat "$scratch/err")"
[ "$(pages_of "$store")" = "$((20000 - removed)) 0" ] || fail "gc removed $removed but $(pages_of "$store") remain"
left=$((20000 - removed))
[ "$left" -gt 0 ] || fail "gc was not stopped early"

# clear: the same, by namespace, on the store filled up again.
"$kvtier" bench --dir "$store" --layout files --pages 20000 --page-bytes 4096 --batch 64 --keep --quiet >/dev/null
[ "$(pages_of "$store")" = "20000 0" ] || fail "bench --keep left $(pages_of "$store")"
oldest=$(oldest_page "$store")
interrupt_when "removal" gone "$oldest" -- "$kvtier" clear "$store" --namespace "$ns"
removed=$(sed -nE "s/.*interrupted: namespace $ns: removed ([0-9]+) of 20000 pages.*/\1/p" "$scratch/err")
[ -n "$removed" ] || fail "clear: $(cat "$scratch/err")"
[ "$(pages_of "$store")" = "$((20000 - removed)) 0" ] || fail "clear removed $removed but $(pages_of "$store") remain"
[ "$removed" -lt 20000 ] || fail "clear was not stopped early"

# bench: a long run stopped once it has written pages: exit 130, the counts, and its pages
# and temporaries gone.
has_pages() { [ -n "$(find "$scratch/long" -type f -name '[0-9a-f]*' -size +0 2>/dev/null | head -n1)" ]; }
interrupt_when "page written" has_pages -- \
  "$kvtier" bench --dir "$scratch/long" --pages 1000000 --page-bytes 4096 --batch 64
grep -qE 'kvtier bench: interrupted: [0-9]+ of 1000000 pages written, 0 read, 0 checked; pages cleared' \
  "$scratch/err" || fail "bench: $(cat "$scratch/err")"
written=$(sed -nE 's/.*interrupted: ([0-9]+) of.*/\1/p' "$scratch/err")
[ "$written" -gt 0 ] && [ "$written" -lt 1000000 ] || fail "bench wrote $written pages"
[ "$(pages_of "$scratch/long")" = "0 0" ] || fail "bench left $(pages_of "$scratch/long") pages and temporaries"
echo "PASS"
