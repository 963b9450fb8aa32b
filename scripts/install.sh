#!/usr/bin/env bash
# Installs hookrelay from this checkout as a systemd service, or removes it again.
#
#   sudo scripts/install.sh                    build (npm ci) and install into /opt/hookrelay
#   sudo ./scripts/install.sh                  from an unpacked hookrelay-<version>-linux-<arch>.tar.gz:
#                                              install it as it is (its own Node.js runtime, no build)
#   sudo scripts/install.sh --uninstall        remove it; the configuration and the state stay
#   DESTDIR=/tmp/stage scripts/install.sh      stage everything under /tmp/stage (no root needed)
#
# What it puts where (PREFIX is /opt/hookrelay unless --prefix says otherwise):
#   PREFIX/                               the package (dist/, docs/, config/, systemd/), its
#                                         production dependencies, bin/hookrelay (a launcher that
#                                         runs PREFIX/dist/cli.js with the Node.js that installed it)
#                                         and .hookrelay-install (what was installed, for --uninstall)
#   BINDIR/hookrelay                      symlink to PREFIX/bin/hookrelay (BINDIR: /usr/local/bin)
#   /etc/systemd/system/hookrelay.service the unit, with ExecStart= under PREFIX
#   /etc/hookrelay/hookrelay.json         from config/hookrelay.example.json, only if absent; never
#                                         overwritten, kept by --uninstall
#   the system user `hookrelay`           created if missing (not with DESTDIR); kept by --uninstall,
#                                         since it owns the kept state
# It never touches /var/lib/hookrelay (the database): systemd creates it at the first start
# (StateDirectory=), and --uninstall keeps it. With DESTDIR, every path above is under DESTDIR and
# nothing outside it is changed (no user, no systemctl). docs/operations.md has the procedure.
set -euo pipefail
umask 022 # what it installs is readable by the service user, whatever the caller's umask

SERVICE=hookrelay
CONF_DIR=/etc/hookrelay
CONF_FILE=$CONF_DIR/hookrelay.json
STATE_DIR=/var/lib/hookrelay
UNIT_FILE=/etc/systemd/system/$SERVICE.service
MARKER=.hookrelay-install
DEFAULT_PREFIX=/opt/hookrelay

prefix=$DEFAULT_PREFIX
bindir=/usr/local/bin
destdir=${DESTDIR:-}
action=install
build=yes

die() {
  printf 'install.sh: %s\n' "$*" >&2
  exit 2
}
step() { printf '==> %s\n' "$*"; }

usage() {
  cat <<'EOF'
Usage: scripts/install.sh [--prefix DIR] [--bindir DIR] [--no-build] [--uninstall]

  --prefix DIR   where hookrelay goes (default /opt/hookrelay); a directory of its own
  --bindir DIR   where the `hookrelay` command is linked (default /usr/local/bin)
  --no-build     install the build already in this checkout (after `npm ci`) instead of running npm ci
  --uninstall    remove what an earlier run installed; keep /etc/hookrelay and /var/lib/hookrelay
  DESTDIR=DIR    (environment) stage every file under DIR, for packaging or testing

Run as root, unless DESTDIR is set. Installing again upgrades in place and keeps the configuration.
EOF
}

while (($# > 0)); do
  case $1 in
    --prefix) (($# >= 2)) || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    --bindir) (($# >= 2)) || die "--bindir needs a directory"; bindir=$2; shift 2 ;;
    --bindir=*) bindir=${1#--bindir=}; shift ;;
    --no-build) build=no; shift ;;
    --uninstall) action=uninstall; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

for dir in "$prefix" "$bindir"; do
  [[ $dir == /* ]] || die "'$dir' is not an absolute path; give --prefix and --bindir as /absolute/paths"
  # They end up in the unit's ExecStart= and in the launcher: no spaces, quotes or other specials.
  [[ $dir =~ ^[A-Za-z0-9._/+-]+$ ]] || die "'$dir' has characters other than letters, digits and . _ + - /; choose a plainer path"
done
[[ -z $destdir || $destdir == /* ]] || die "DESTDIR='$destdir' is not an absolute path"
prefix=${prefix%/}
bindir=${bindir%/}
destdir=${destdir%/}
# The prefix is removed whole by --uninstall, so it must be hookrelay's own directory: not a
# system directory (here), and not a directory that holds something else (checked below).
case $prefix in
  '' | /bin | /boot | /dev | /etc | /home | /lib | /lib64 | /opt | /proc | /root | /run | /sbin | /srv | /sys | /tmp | \
    /usr | /usr/bin | /usr/lib | /usr/local | /usr/local/bin | /usr/local/lib | /usr/sbin | /usr/share | /var | /var/lib)
    die "--prefix '${prefix:-/}' is a system directory; give hookrelay a directory of its own, such as $DEFAULT_PREFIX" ;;
esac
if [[ -z $destdir && $(id -u) != 0 ]]; then
  die "run as root (sudo scripts/install.sh ...), or set DESTDIR to stage the files somewhere else"
fi

target=$destdir$prefix
link=$destdir$bindir/$SERVICE
unit=$destdir$UNIT_FILE
conf=$destdir$CONF_FILE
systemd_running() { [[ -z $destdir && -d /run/systemd/system ]] && command -v systemctl >/dev/null; }

# --- uninstall -------------------------------------------------------------------------------
if [[ $action == uninstall ]]; then
  [[ -f $target/$MARKER ]] || die "no hookrelay installed by this script in $target (no $MARKER there); nothing removed"
  manifest_link=$(sed -n 's/^link=//p' "$target/$MARKER")
  if systemd_running && { systemctl is-enabled --quiet "$SERVICE" 2>/dev/null || systemctl is-active --quiet "$SERVICE"; }; then
    step "stopping and disabling $SERVICE"
    systemctl disable --now "$SERVICE"
  fi
  if systemd_running; then systemctl disable --now "$SERVICE-backup.timer" 2>/dev/null || true; fi
  backup_unit=$(dirname "$unit")/$SERVICE-backup.service
  if [[ -f $backup_unit ]] && grep -q "^ExecStart=$prefix/bin/$SERVICE " "$backup_unit"; then
    step "removing $backup_unit and $SERVICE-backup.timer"
    rm -f "$backup_unit" "$(dirname "$unit")/$SERVICE-backup.timer"
  fi
  if [[ -f $unit ]] && grep -q "^ExecStart=$prefix/bin/$SERVICE " "$unit"; then
    step "removing $unit"
    rm -f "$unit"
    if systemd_running; then systemctl daemon-reload; fi
  fi
  if [[ -n $manifest_link && -L $destdir$manifest_link && $(readlink "$destdir$manifest_link") == "$prefix/bin/$SERVICE" ]]; then
    step "removing $destdir$manifest_link"
    rm -f "$destdir$manifest_link"
  fi
  step "removing $target"
  rm -rf "$target"
  printf '\nhookrelay is uninstalled. Kept, as they hold your data and settings:\n'
  printf '  %-44s %s\n' \
    "$destdir$CONF_DIR" "the configuration (rm -r it to delete it)" \
    "$destdir$STATE_DIR" "database, JWT secret, credential key, feed position (rm -r it to delete every event and webhook)" \
    "the user $SERVICE" "owns that state (userdel $SERVICE once the state is gone)" \
    "$destdir$UNIT_FILE.d" "your drop-ins, if any"
  exit 0
fi

# --- install ---------------------------------------------------------------------------------
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
[[ -f $src/package.json && -f $src/systemd/$SERVICE.service ]] || die "$src is not a hookrelay checkout"
# An unpacked tarball of scripts/package.sh brings its runtime and its dependencies: installed as it is.
packaged=no
if [[ -f $src/.hookrelay-package && -x $src/runtime/bin/node ]]; then
  packaged=yes
  build=no
  node_bin=$prefix/runtime/bin/node
  node_version=$("$src/runtime/bin/node" --version)
else
  command -v node >/dev/null || die "no node on PATH; install Node.js 22.14 or newer first (README, Requirements)"
  command -v npm >/dev/null || die "no npm on PATH; it comes with Node.js (README, Requirements)"
  node_bin=$(command -v node)
  node -e 'process.exit(Number(process.versions.napi) >= 10 ? 0 : 1)' ||
    die "Node.js $(node --version) ($node_bin) is too old: hookrelay needs Node.js 22.14 or newer (README, Requirements)"
  node_version=$(node --version)
fi
if [[ -e $target && ! -f $target/$MARKER && -n $(ls -A "$target") ]]; then
  die "$target exists, is not empty and was not installed by this script; choose another --prefix or empty it"
fi
case $packaged:$node_bin in
  yes:*) ;;
  *:/home/* | *:/root/* | *:/run/user/*)
    printf 'install.sh: warning: %s is under a home directory, which the unit hides from the service (ProtectHome=yes); install Node.js system-wide (README, Requirements)\n' "$node_bin" >&2 ;;
  *:/tmp/* | *:/var/tmp/*)
    tmp_dir=/tmp
    [[ $node_bin == /var/tmp/* ]] && tmp_dir=/var/tmp
    printf 'install.sh: warning: %s is under %s/, which the unit replaces with an empty directory of its own (PrivateTmp=yes): the service would not find it; install Node.js system-wide (README, Requirements)\n' "$node_bin" "$tmp_dir" >&2 ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/hookrelay-install.XXXXXX")
new=
cleanup() {
  rm -rf "$work"
  if [[ -n $new ]]; then rm -rf "$new"; fi
}
trap cleanup EXIT

if [[ $build == yes ]]; then
  step "building in $src (npm ci, Node.js $(node --version))"
  (cd "$src" && npm ci --no-audit --no-fund)
fi
[[ -f $src/dist/cli.js && -d $src/node_modules ]] || die "$src has no build (dist/cli.js, node_modules); run npm ci there, or drop --no-build"

mkdir -p "$(dirname "$target")"
new=$(mktemp -d "$target.new.XXXXXX")
chmod 0755 "$new" # mktemp makes it 0700; the service user must read the code
if [[ $packaged == yes ]]; then
  step "copying the unpacked package $src (its runtime, dist/, its production dependencies)"
  cp -a "$src/." "$new/"
else
  step "packing $src (the files of package.json's \"files\", as npm pack does)"
  tarball=$(cd "$src" && npm pack --ignore-scripts --silent --pack-destination "$work" | tail -n 1)
  tar -xzf "$work/$tarball" -C "$new" --strip-components=1
  cp "$src/package-lock.json" "$new/"

  step "copying the production dependencies"
  # The packages `npm ls --omit=dev` lists, copied from the checkout's node_modules as they are (the
  # versions the lockfile pins and the tests ran with), without the build tools.
  (cd "$src" && npm ls --omit=dev --all --parseable) | while IFS= read -r dir; do
    [[ $dir == "$src/node_modules/"* ]] || continue
    rel=${dir#"$src/"}
    [[ -e $new/$rel ]] && continue # inside a package copied already
    mkdir -p "$(dirname "$new/$rel")"
    cp -a "$dir" "$new/$rel"
  done
  [[ -d $new/node_modules/better-sqlite3 ]] || die "the production dependencies were not copied (npm ls --omit=dev listed none)"

  mkdir -p "$new/bin"
  cat >"$new/bin/$SERVICE" <<EOF
#!/bin/sh
# hookrelay, run by the Node.js it was installed with. Installing again with another Node.js
# first in PATH changes it.
exec '$node_bin' '$prefix/dist/cli.js' "\$@"
EOF
  chmod 0755 "$new/bin/$SERVICE"
fi
runner=node
[[ $packaged == yes ]] && runner=$src/runtime/bin/node
version=$("$runner" -p 'require(process.argv[1]).version' "$new/package.json")

# The unit, pointed at this prefix (it names /opt/hookrelay, the default).
sed -e "s|$DEFAULT_PREFIX\\b|$prefix|g" "$new/systemd/$SERVICE.service" >"$work/$SERVICE.service"
grep -q "^ExecStart=$prefix/bin/$SERVICE serve " "$work/$SERVICE.service" || die "systemd/$SERVICE.service has no ExecStart=$DEFAULT_PREFIX/bin/$SERVICE serve ... line to point at $prefix"

created_user=no
if [[ -z $destdir ]] && ! id "$SERVICE" >/dev/null 2>&1; then
  step "creating the system user $SERVICE"
  useradd --system --home-dir "$STATE_DIR" --no-create-home --shell /usr/sbin/nologin "$SERVICE"
  created_user=yes
fi

cat >"$new/$MARKER" <<EOF
# Written by scripts/install.sh; read by scripts/install.sh --uninstall.
version=$version
prefix=$prefix
node=$node_bin
unit=$UNIT_FILE
link=$bindir/$SERVICE
config=$CONF_FILE
created_user=$created_user
EOF

step "installing hookrelay $version into $target"
old=
if [[ -e $target ]]; then
  old=$(mktemp -d "$target.old.XXXXXX")
  rmdir "$old"
  mv "$target" "$old"
fi
mv "$new" "$target"
new=
if [[ -n $old ]]; then rm -rf "$old"; fi

step "installing $unit"
install -D -m 0644 "$work/$SERVICE.service" "$unit"
# The nightly backup, off until enabled (systemctl enable --now hookrelay-backup.timer).
for extra in "$SERVICE-backup.service" "$SERVICE-backup.timer"; do
  sed -e "s|$DEFAULT_PREFIX\\b|$prefix|g" "$target/systemd/$extra" >"$work/$extra"
  install -D -m 0644 "$work/$extra" "$(dirname "$unit")/$extra"
done

if [[ -e $link || -L $link ]] && [[ $(readlink "$link" || true) != "$prefix/bin/$SERVICE" ]]; then
  printf 'install.sh: warning: %s exists and is not this install'"'"'s link; left alone (run %s/bin/%s, or remove it and install again)\n' "$link" "$prefix" "$SERVICE" >&2
else
  step "linking $link -> $prefix/bin/$SERVICE"
  mkdir -p "$(dirname "$link")"
  ln -sfn "$prefix/bin/$SERVICE" "$link"
fi

if [[ -e $conf ]]; then
  step "keeping the existing configuration $conf"
else
  step "writing $conf from config/hookrelay.example.json (stateDir $STATE_DIR)"
  install -d -m 0755 "$(dirname "$conf")"
  # Every key with its default, and stateDir where the unit keeps the state, so that the CLI
  # given only this file (HOOKRELAY_CONFIG) finds the daemon's database.
  sed -e "s|^  \"stateDir\": \"./var\",\$|  \"stateDir\": \"$STATE_DIR\",|" "$target/config/hookrelay.example.json" >"$work/config.json"
  grep -q "\"stateDir\": \"$STATE_DIR\"" "$work/config.json" || die "config/hookrelay.example.json has no \"stateDir\": \"./var\" line to set"
  install -m 0640 "$work/config.json" "$conf"
  # Readable by the service user, which may hold secrets later (auth.secret).
  if [[ -z $destdir ]]; then chgrp "$SERVICE" "$conf"; fi
fi

if systemd_running; then
  systemctl daemon-reload
  if systemctl is-active --quiet "$SERVICE"; then
    printf '\nhookrelay %s is installed, but the running daemon still runs the old code: sudo systemctl restart %s\n(next time, stop it before installing: a new version may migrate the database; docs/operations.md, Upgrade)\n' "$version" "$SERVICE"
    exit 0
  fi
fi

cat <<EOF

hookrelay $version is installed in $target (Node.js $node_version, $node_bin).
Next steps:
  1. Review the configuration: $CONF_FILE (docs/configuration.md; drop the keys you keep at their defaults)
  2. Start it now and at every boot:   sudo systemctl enable --now $SERVICE
  3. Check it:                         systemctl status $SERVICE; curl -s http://127.0.0.1:8080/readyz
  4. Use the CLI as the service user:  sudo -u $SERVICE env HOOKRELAY_CONFIG=$CONF_FILE $SERVICE orgs add acme --name "Acme Corp"
Logs: journalctl -u $SERVICE. Upgrade: pull, then run this script again. Remove: scripts/install.sh --uninstall
EOF
