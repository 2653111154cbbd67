#!/usr/bin/env bash
# Builds the container images the docker tests and bench/docker.sh use, from the host's static
# busybox (no registry is needed or reached): berth-test/busybox:1 (no USER) and
# berth-test/busybox-user:1 (USER 4321:4321). Idempotent and safe to run from parallel tests
# (flock). Exits 2 with a reason on stderr when docker or a static busybox is missing.
set -euo pipefail

command -v docker >/dev/null || { echo "no docker CLI: apt-get install docker.io" >&2; exit 2; }
docker info >/dev/null 2>&1 || { echo "the Docker daemon is not running: start dockerd (scripts/test.sh does)" >&2; exit 2; }
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
  echo "no static /bin/busybox: apt-get install busybox-static" >&2
  exit 2
fi

exec 9>"${TMPDIR:-/tmp}/berth-test-image.lock"
flock 9
if docker image inspect berth-test/busybox:1 berth-test/busybox-user:1 >/dev/null 2>&1; then
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
tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' - berth-test/busybox:1 >/dev/null
tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' --change 'USER 4321:4321' - berth-test/busybox-user:1 >/dev/null
