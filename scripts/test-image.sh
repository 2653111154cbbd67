#!/usr/bin/env bash
# Builds the container images the container tests and bench/docker.sh use, from the host's static
# busybox (no registry is needed or reached): berth-test/busybox:1 (no USER) and
# berth-test/busybox-user:1 (USER 4321:4321), in Docker's store or, with `podman` as the first
# argument, in Podman's. Idempotent and safe to run from parallel tests (flock). Exits 2 with a
# reason on stderr when the engine or a static busybox is missing.
#
#   scripts/test-image.sh [docker|podman]
set -euo pipefail

engine="${1:-docker}"
case "$engine" in
  docker)
    command -v docker >/dev/null || { echo "no docker CLI: apt-get install docker.io" >&2; exit 2; }
    docker info >/dev/null 2>&1 || { echo "the Docker daemon is not running: start dockerd (scripts/test.sh does)" >&2; exit 2; }
    have_images() { docker image inspect berth-test/busybox:1 berth-test/busybox-user:1 >/dev/null 2>&1; }
    import() { docker import "$@"; }
    ;;
  podman)
    command -v podman >/dev/null || { echo "no podman: apt-get install podman" >&2; exit 2; }
    # Container kernels run with an init (Docker's `--init`), which is Podman's catatonit.
    [ -x /usr/libexec/podman/catatonit ] || { echo "no catatonit (podman's init): apt-get install catatonit" >&2; exit 2; }
    have_images() { podman image exists berth-test/busybox:1 && podman image exists berth-test/busybox-user:1; }
    import() { podman import --quiet "$@"; }
    ;;
  *)
    echo "unknown container engine \`$engine\`: use docker or podman" >&2
    exit 2
    ;;
esac
if [ ! -x /bin/busybox ] || ldd /bin/busybox >/dev/null 2>&1; then
  echo "no static /bin/busybox: apt-get install busybox-static" >&2
  exit 2
fi

exec 9>"${TMPDIR:-/tmp}/berth-$engine-test-image.lock"
flock 9
if have_images; then
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
tar -C "$root" -c . | import --change 'ENV PATH=/bin' - berth-test/busybox:1 >/dev/null
tar -C "$root" -c . | import --change 'ENV PATH=/bin' --change 'USER 4321:4321' - berth-test/busybox-user:1 >/dev/null
