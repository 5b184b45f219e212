# scripts/deploy_check.sh, setup: the engine (podman with runc), the Debian
# 12 base image made with debootstrap, and the images under test. Sourced.
#
# Why runc and cgroupfs: on these hosts (cgroup v1, root in a container)
# crun fails on setrlimit and cgroups, and there is no systemd to manage
# cgroups. No registry is reachable, so every image is built here from a
# base made by debootstrap from the host's own Debian mirror.

# podman's recommends that matter here, named: catatonit (the pause image
# of pods), netavark + aardvark-dns + iptables (bridge networks, published
# ports); runc (see above); python3-yaml reads the manifests.
DC_PACKAGES=(podman runc catatonit netavark aardvark-dns iptables debootstrap fuse-overlayfs
  uidmap python3 python3-yaml)

install_engine() {
  [ "$(id -u)" -eq 0 ] ||
    die "run as root: rootful podman (the pods' uids, volume ownership, published ports)"
  local missing=() p
  for p in "${DC_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" >/dev/null ||
      missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
          "${missing[@]}"; } >"$DC_WORK/apt.log" 2>&1 ||
      die "apt-get install ${missing[*]} failed: $DC_WORK/apt.log"
  fi
  # No default ulimits: a container gets only those its command asks for
  # (root in a container cannot raise a limit above the host's).
  cat >"$DC_WORK/containers.conf" <<'CONF'
[containers]
default_ulimits = []
[network]
network_backend = "netavark"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
  export CONTAINERS_CONF=$DC_WORK/containers.conf
  pm info >"$DC_WORK/podman-info.txt" 2>&1 || die "podman info failed: $DC_WORK/podman-info.txt"
  say "engine: $(podman --version), $(runc --version | head -1), storage $(pm info --format '{{.Store.GraphDriverName}}')"
}

# The first deb822 or one-line source of the host's apt config for SUITE's
# archive ("debian" or "debian-security").
host_mirror() {
  local want=$1 uri
  uri=$(cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list 2>/dev/null |
    grep -oE "https?://[^ ]+/${want}/?( |$)" | head -1 | tr -d ' ')
  echo "${uri%/}"
}

# localhost/gnmr-debian:12-slim: debootstrap --variant=minbase bookworm,
# trimmed like the official debian:12-slim (no docs but copyrights, no man
# pages or locales, no apt lists or caches) with the same apt sources.
make_base_image() {
  if pm image exists "$DC_BASE"; then
    say "base image $DC_BASE present ($(image_mb "$DC_BASE") MB)"
    return
  fi
  local mirror=${DEBIAN_MIRROR:-$(host_mirror debian)}
  local security=${DEBIAN_SECURITY_MIRROR:-$(host_mirror debian-security)}
  mirror=${mirror:-http://deb.debian.org/debian}
  security=${security:-http://deb.debian.org/debian-security}
  local root=$DC_WORK/rootfs
  rm -rf "$root"
  say "making $DC_BASE: debootstrap --variant=minbase bookworm from $mirror"
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$DC_WORK/debootstrap.log" 2>&1 ||
    die "debootstrap failed: $DC_WORK/debootstrap.log"
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  cat >"$root/etc/dpkg/dpkg.cfg.d/slim" <<'SLIM'
# As debian:12-slim: packages installed later leave these out too.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
SLIM
  cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'CLEAN'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
CLEAN
  find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$root"/usr/share/{groff,info,linda,locale,man}/* "$root"/usr/share/lintian/overrides/* \
    "$root"/var/cache/apt/archives/*.deb "$root"/var/cache/apt/*.bin \
    "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/var/log/apt/*
  tar -C "$root" -c . | pm import --change 'CMD ["bash"]' - "$DC_BASE" >/dev/null 2>&1 ||
    die "podman import of $DC_BASE failed"
  rm -rf "$root"
  say "base image $DC_BASE made ($(image_mb "$DC_BASE") MB)"
}

image_mb() { echo $(( $(pm image inspect --format '{{.Size}}' "$1") / 1000000 )); }

# build TAG ARGS... CONTEXT: podman build with the layer cache (unchanged
# steps are not rerun), docker format (OCI images drop HEALTHCHECK), the
# host's network for apt.
build() {
  local tag=$1; shift
  local log=$DC_WORK/build-${tag##*/}.log t0
  log=${log//:/-}
  t0=$(date +%s)
  pm build --format docker --layers --network=host \
    --build-arg DEBIAN_IMAGE="$DC_BASE" --build-arg RUNTIME_IMAGE="$DC_BASE" \
    --build-arg BUILD_JOBS="$DC_JOBS" -t "$tag" "$@" >"$log" 2>&1 ||
    { tail -30 "$log"; die "podman build of $tag failed: $log"; }
  say "built $tag in $(( $(date +%s) - t0 )) s ($(image_mb "$tag") MB)"
}

build_images() {
  build "$DC_IMAGE" -f deploy/container/Dockerfile .
  # The build stage (cached by the build above), for the test trainer.
  build "$DC_BUILD_IMAGE" -f deploy/container/Dockerfile --target build .
  build "$DC_SYNTH_IMAGE" -f scripts/deploy_check/synth.Dockerfile \
    --build-arg BUILD_IMAGE="$DC_BUILD_IMAGE" --build-arg GNMRD_IMAGE="$DC_IMAGE" \
    scripts/deploy_check
  build "$DC_PROM_IMAGE" -f deploy/compose/prometheus.Dockerfile deploy/compose
}
