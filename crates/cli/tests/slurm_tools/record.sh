#!/bin/sh
# A recorder in front of one Slurm command (berth's tests and bench/slurm-tools.sh): linked as
# `sbatch`, `sacct`, ... in a directory first on the PATH, it runs the command of its name from
# the directory named in `real` beside it, then appends its arguments, exit status and stderr
# to `calls.log` one directory up: fields split by \037, status and stderr by \035, one record
# per call ended by \036, written with one append so calls at the same time never interleave.
here=$(dirname "$0")
name=$(basename "$0")
real=$(cat "$here/real")
err=$(mktemp) && rec=$(mktemp) || exit 111
"$real/$name" "$@" 2>"$err"
rc=$?
{
  printf '%s' "$name"
  for a in "$@"; do printf '\037%s' "$a"; done
  printf '\035%s\035' "$rc"
  cat "$err"
  printf '\036'
} >"$rec"
cat "$rec" >>"$here/../calls.log"
cat "$err" >&2
rm -f "$err" "$rec"
exit $rc
