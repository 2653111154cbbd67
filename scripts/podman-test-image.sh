#!/usr/bin/env bash
# Builds the container images the podman tests use in Podman's store, from the host's static
# busybox (no registry is needed or reached), as scripts/test-image.sh does for Docker:
# berth-test/busybox:1 (no USER) and berth-test/busybox-user:1 (USER 4321:4321). Idempotent and
# safe to run from parallel tests (flock). Exits 2 with a reason on stderr when podman or a
# static busybox is missing.
set -euo pipefail

command -v podman >/dev/null || { echo "no podman: apt-get install podman" >&2; exit 2; }
# Container kernels run with an init (Docker's `--init`), which is Podman's catatonit.
[ -x /usr/libexec/podman/catatonit ] || { echo "no catatonit (podman's init): apt-get install catatonit" >&2; exit 2; }
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
  echo "no static /bin/busybox: apt-get install busybox-static" >&2
  exit 2
fi

exec 9>"${TMPDIR:-/tmp}/berth-podman-test-image.lock"
flock 9
if podman image exists berth-test/busybox:1 && podman image exists berth-test/busybox-user:1; then
  exit 0
fi
root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root" "$root/proc" "$root/sys" "$root/dev"
chmod 1777 "$root/tmp"
cp /bin/busybox "$root/bin/busybox"
for applet in $("$root/bin/busybox" --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
tar -C "$root" -c . | podman import --quiet --change 'ENV PATH=/bin' - berth-test/busybox:1 >/dev/null
tar -C "$root" -c . | podman import --quiet --change 'ENV PATH=/bin' --change 'USER 4321:4321' - berth-test/busybox-user:1 >/dev/null
