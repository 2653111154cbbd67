#!/usr/bin/env bash
# Builds berth's Debian package with cargo-deb from the binary the test run built (the dev
# profile: a quick check of what goes in; releases run `cargo deb -p berth-cli`), then checks
# it with dpkg-deb: its control fields, its files (binary, systemd units, configuration, docs),
# its conffiles and its postinst. Usage: scripts/check-deb.sh [TARGET_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:-${CARGO_TARGET_DIR:-target}}
fail() { echo "check-deb: $*" >&2; exit 1; }

[ -x "$target/debug/berth" ] || cargo build --quiet --bin berth
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo deb -p berth-cli --profile dev --no-build --fast -o "$out/berth.deb" 2>"$out/log" \
  || { cat "$out/log" >&2; fail "cargo deb failed"; }

info=$(dpkg-deb --info "$out/berth.deb")
for want in "Package: berth" "Depends: adduser" "Section: admin" "conffiles" "postinst"; do
  grep -q "$want" <<<"$info" || fail "no \`$want\` in the package's control data:"$'\n'"$info"
done
files=$(dpkg-deb --contents "$out/berth.deb" | awk '{print $1, $NF}')
for want in "-rwxr-xr-x ./usr/bin/berth" \
  "-rw-r--r-- ./lib/systemd/system/berth-manager.service" \
  "-rw-r--r-- ./lib/systemd/system/berth-agent.service" \
  "-rw-r--r-- ./lib/systemd/system/berth-cache.service" \
  "-rw-r--r-- ./etc/berth/manager.toml" \
  "-rw-r--r-- ./usr/share/doc/berth/deploy.md"; do
  grep -qxF -- "$want" <<<"$files" || fail "the package lacks \`$want\`:"$'\n'"$files"
done
dpkg-deb --ctrl-tarfile "$out/berth.deb" | tar -xO ./conffiles | grep -qx /etc/berth/manager.toml \
  || fail "/etc/berth/manager.toml is not a conffile (an upgrade would overwrite the admin's edits)"
dpkg-deb --ctrl-tarfile "$out/berth.deb" | tar -xO ./postinst >"$out/postinst"
sh -n "$out/postinst" || fail "postinst is not valid sh"
grep -q "adduser --system" "$out/postinst" || fail "postinst does not create the berth user"
echo "check-deb: $(du -h "$out/berth.deb" | cut -f1) package, control data, files, conffiles and postinst as expected"
