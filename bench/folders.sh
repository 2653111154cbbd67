#!/usr/bin/env bash
# Data-folder transfer figures (issue 19): `berth upload` and `berth download` against
# `rsync -a` over SSH, both on loopback to the same machine, for many small files and for one
# large file, fresh and again with nothing changed (both then compare and send nothing).
# sshd is a private one on a free port with throwaway keys (needs openssh-server and rsync;
# run as root so that sshd may switch users). berth is a fresh `berth up` on a temp data dir.
# (Its work dir is `$work`: run_with_berth's own `tmp` would shadow a `tmp` here.)
#
#   bench/folders.sh [SMALL_FILES=10000] [LARGE_MIB=1024]
#
# BIN_DIR: where a `berth` binary is (default: this tree's release build, built here).
# docs/perf.md keeps the figures.
set -euo pipefail
cd "$(dirname "$0")/.."
SMALL=${1:-10000}
LARGE=${2:-1024}
if [ -n "${BIN_DIR:-}" ]; then
  BIN=$BIN_DIR/berth
else
  cargo build --release --quiet --bin berth
  BIN=$(realpath "${CARGO_TARGET_DIR:-target}/release/berth")
fi
source bench/lib.sh
command -v rsync >/dev/null && [ -x /usr/sbin/sshd ] || { echo "needs rsync and openssh-server (apt-get install rsync openssh-server)" >&2; exit 1; }

work=$(mktemp -d)
sshd_pid=
cleanup() {
  [ -n "$sshd_pid" ] && kill "$sshd_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "== data: $SMALL files of 4 KiB, one file of $LARGE MiB"
mkdir -p "$work/src/small" "$work/src/large"
python3 - "$work/src/small" "$SMALL" <<'PY'
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    sub = os.path.join(d, f"d{i // 1000:03}")
    os.makedirs(sub, exist_ok=True)
    with open(os.path.join(sub, f"f{i:06}"), "wb") as f:
        f.write(os.urandom(4096))
PY
head -c "$((LARGE << 20))" /dev/urandom > "$work/src/large/big.bin"

# A private sshd on a free port, a key for root.
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
ssh-keygen -q -t ed25519 -N '' -f "$work/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$work/user_key"
mkdir -p "$work/ssh"
cp "$work/user_key.pub" "$work/ssh/authorized_keys"
chmod 700 "$work" "$work/ssh"; chmod 600 "$work/ssh/authorized_keys"
mkdir -p /run/sshd
/usr/sbin/sshd -D -f /dev/null -p "$port" -o ListenAddress=127.0.0.1 -h "$work/host_key" \
  -o "AuthorizedKeysFile=$work/ssh/authorized_keys" -o PermitRootLogin=prohibit-password \
  -o StrictModes=no -o "PidFile=$work/sshd.pid" -o LogLevel=ERROR &
sshd_pid=$!
ssh_cmd="ssh -p $port -i $work/user_key -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
for _ in $(seq 1 50); do $ssh_cmd root@127.0.0.1 true 2>/dev/null && break; sleep 0.1; done

secs() { local s; s=$(date +%s.%N); "$@" >/dev/null 2>"$work/last.err" || { echo "failed: $* $(cat "$work/last.err")" >&2; exit 1; }; python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$s" "$(date +%s.%N)"; }
row() { python3 -c "import sys; b,r=float(sys.argv[2]),float(sys.argv[3]); print(f'{sys.argv[1]:<34} berth {b:7.2f} s   rsync {r:7.2f} s   berth/rsync {b/r:5.2f}')" "$@"; }

bench() {
  "$BIN" folder create bench >/dev/null
  for what in small large; do
    local src="$work/src/$what"
    rm -rf "$work/rs-$what" "$work/dl-$what"; mkdir -p "$work/dl-$what" "$work/rsdl-$what"
    sync
    b_up=$(secs "$BIN" upload bench "$src")
    r_up=$(secs rsync -a -e "$ssh_cmd" "$src/" "root@127.0.0.1:$work/rs-$what/")
    b_again=$(secs "$BIN" upload bench "$src")
    r_again=$(secs rsync -a -e "$ssh_cmd" "$src/" "root@127.0.0.1:$work/rs-$what/")
    b_down=$(secs "$BIN" download bench "$what" "$work/dl-$what")
    r_down=$(secs rsync -a -e "$ssh_cmd" "root@127.0.0.1:$work/rs-$what/" "$work/rsdl-$what/")
    cmp <(cd "$src" && find . -type f -exec sha256sum {} + | sort) <(cd "$work/dl-$what/$what" && find . -type f -exec sha256sum {} + | sort) \
      || { echo "the download differs from the source" >&2; exit 1; }
    row "$what: upload" "$b_up" "$r_up"
    row "$what: upload again, nothing changed" "$b_again" "$r_again"
    row "$what: download" "$b_down" "$r_down"
  done
}
export -f bench secs row
export BIN work ssh_cmd
echo "== machine: $(nproc) CPUs, $(uname -r), $(rsync --version | head -n1), $(ssh -V 2>&1), $(date -u '+%F %H:%M')Z"
run_with_berth bash -c bench
