#!/usr/bin/env bash
# Records docs/session/tmux-session.txt (plain) and tmux-session.ansi (with colours) from a
# real terminal: a tmux session 120x40 running runjournal on a copy of examples/glossary;
# and docs/session/progress.txt: the progress line of a run with --jobs 4, three moments.
#
#   docs/session/record.sh [PATH_TO_BIN_WITH_RUNJOURNAL]
#
# The copy holds every handbook page ten times, so a cold run lasts long enough for its
# progress line to be captured. Nothing outside a temp directory is touched.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${1:-$repo/.venv/bin}
session=rj-docs-$$
work=$(mktemp -d)
cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

cp -r "$repo/examples/glossary" "$work/glossary"
for page in "$work"/glossary/docs/*.md; do
  for i in 1 2 3 4 5 6 7 8 9; do cp "$page" "${page%.md}-copy$i.md"; done
done
mkdir "$work/home"

tmux new-session -d -s "$session" -x 120 -y 40 -c "$work" \
  -e HOME="$work/home" -e PATH="$bin:/usr/bin:/bin" -e TERM=tmux-256color \
  -e PS1='$ ' -e LANG=C.UTF-8 bash --noprofile --norc
tmux set-option -t "$session" status off >/dev/null
# The environment of the shell, set explicitly (a running tmux server keeps its own).
tmux send-keys -t "$session" "export HOME='$work/home' PATH='$bin:/usr/bin:/bin' TERM=tmux-256color; unset NO_COLOR RUNJOURNAL_CONFIG; clear" Enter
sleep 0.5

plain="$here/tmux-session.txt"
ansi="$here/tmux-session.ansi"
: >"$plain"
: >"$ansi"

capture() {  # $1: what this screen shows
  for out in "$plain" "$ansi"; do
    printf '%s\n' "---- $1 " "" >>"$out"
  done
  tmux capture-pane -p -t "$session" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >>"$plain"
  tmux capture-pane -p -e -t "$session" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >>"$ansi"
  printf '\n' | tee -a "$plain" >>"$ansi"
}

run() {  # type a command, wait until it has finished
  tmux send-keys -t "$session" "clear; $1; tmux wait-for -S $session-done" Enter
  tmux wait-for "$session-done"
  sleep 0.3
}

# 1. a cold run: the progress line while it works, then the summary
tmux send-keys -t "$session" "clear; runjournal run glossary/pipeline.toml; tmux wait-for -S $session-done" Enter
sleep 2.5
capture "runjournal run glossary/pipeline.toml (while it works: the progress line)"
tmux wait-for "$session-done"
sleep 0.3
capture "runjournal run glossary/pipeline.toml (done: the summary, main output, latest, warnings)"

# 2. a plain run again: the hint on stderr
run "runjournal run glossary/pipeline.toml >/dev/null"
capture "runjournal run glossary/pipeline.toml >/dev/null (a plain run over valid checkpoints: the hint on stderr)"

# 3. an edit, a resume, what changed
run "echo 'The **write-ahead log** is a log. The write-ahead log comes first.' >> glossary/docs/02-journal.md"
run "runjournal run glossary/pipeline.toml --resume | head -4"
capture "runjournal run --resume after an edit (colours: reuse green, invalid yellow)"
run "runjournal explain latest --changed --limit 6"
capture "runjournal explain latest --changed --limit 6"
run "runjournal runs diff \$(runjournal runs list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"runs\"][-3][\"run_id\"])') latest"
capture "runjournal runs diff <the cold run> latest"

# 4. the progress line of a whole run, three moments of one run with --jobs 4
progress="$here/progress.txt"
: >"$progress"
tmux send-keys -t "$session" "clear; runjournal run glossary/pipeline.toml --jobs 4 >/dev/null; tmux wait-for -S $session-done" Enter
for at in 1.2 0.6 0.6; do
  sleep "$at"
  printf '%s\n' "---- runjournal run glossary/pipeline.toml --jobs 4 (while it works)" "" >>"$progress"
  tmux capture-pane -p -t "$session" | sed -e :a -e '/^\n*$/{$d;N;ba' -e '}' >>"$progress"
  printf '\n' >>"$progress"
done
tmux wait-for "$session-done"
