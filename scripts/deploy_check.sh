#!/usr/bin/env bash
# Deployment verified by running it (deploy/README.md, "Verified by
# running"). Installs podman and its companions (idempotent), makes the
# Debian 12 base image with debootstrap if it is missing, builds the gnmrd
# image (layer cache kept between runs), then checks, each with its figure:
#   1 image      non-root, health check, gnmrctl status and trainers over
#                the published TCP port: served with the token, refused
#                without; graceful stop
#   2 sidecar    podman pod: gnmrd + trainer sharing /run/gnmr, SIGKILL
#                gnmrd mid-run, restart it on the same state volume
#   3 compose    deploy/compose/compose.yaml as podman commands: Prometheus
#                (Debian's) scrapes gnmrd, the non-finite alert fires
#   4 startup    image size (<= 150 MB), gnmrd ready after start (<= 1 s)
#   5 manifests  deploy/kubernetes through kubectl (no cluster)
#   6 kube       deploy/kubernetes run by podman kube play: the sidecar pod
#                and the per-job Deployment with its ConfigMap and Secrets;
#                what kube play cannot run is listed in the result
#   7 wheel      the manylinux wheel (scripts/build_wheel.sh, from build/)
#                installs in a clean container without -dev packages or
#                CUDA and trains 20 steps against gnmrd on a mounted socket
#
#   scripts/deploy_check.sh                  # all (2.5 min + the builds, 15 cold)
#   scripts/deploy_check.sh sidecar compose  # some (the images are built first)
#   DEPLOY_CHECK_JOBS=4 scripts/deploy_check.sh  # compile jobs of the image
#       build (default: nproc; the layer cache keys on it: a new value rebuilds)
#   DEPLOY_CHECK_DIR=/var/tmp/x scripts/deploy_check.sh  # logs, work files
#       (default /var/tmp/gnmr-deploy-check)
#
# Needs root (rootful podman) and the Debian mirror. Exit 0 only when every
# check passed; the summary lists each with its figure.
set -uo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
DC_WORK=${DEPLOY_CHECK_DIR:-/var/tmp/gnmr-deploy-check}
DC_JOBS=${DEPLOY_CHECK_JOBS:-$(nproc)}
DC_BASE=localhost/gnmr-debian:12-slim
DC_IMAGE=localhost/gnmr/gnmrd:0.2.0
DC_BUILD_IMAGE=localhost/gnmr/gnmrd-build:check
DC_SYNTH_IMAGE=localhost/gnmr/synth:check
DC_PROM_IMAGE=localhost/gnmr/prometheus:debian12
mkdir -p "$DC_WORK"
for part in lib setup image sidecar compose manifests kube wheel; do
  source "scripts/deploy_check/$part.sh" || { echo "deploy_check: scripts/deploy_check/$part.sh does not load" >&2; exit 1; }
done
declare -A check_fn=([image]=check_image [sidecar]=check_sidecar [compose]=check_compose
                     [startup]=check_size_and_startup [manifests]=check_manifests
                     [kube]=check_kube [wheel]=check_wheel)
for fn in "${check_fn[@]}"; do
  declare -F "$fn" >/dev/null || { echo "deploy_check: no function $fn (a part did not load)" >&2; exit 1; }
done
checks=("$@")
[ ${#checks[@]} -gt 0 ] || checks=(image sidecar compose startup manifests kube wheel)
for c in "${checks[@]}"; do
  [ -n "${check_fn[$c]:-}" ] || { echo "unknown check '$c' (${!check_fn[*]})" >&2; exit 2; }
done

# Containers, pods and volumes of this script are named gnmr-dc* (the
# compose project too): left over from an interrupted run, or at the end.
cleanup() {
  local c
  for c in $(podman ps -a --format '{{.Names}}' 2>/dev/null | grep '^gnmr-dc'); do
    podman rm -f -v -t 5 "$c" >/dev/null 2>&1
  done
  podman pod rm -f gnmr-dc-pod >/dev/null 2>&1
  for c in $(podman volume ls --format '{{.Name}}' 2>/dev/null | grep '^gnmr-dc'); do
    podman volume rm -f "$c" >/dev/null 2>&1
  done
}

install_engine
make_base_image
# The wheel check builds its own small image; the rest need gnmrd's.
for c in "${checks[@]}"; do
  if [ "$c" != wheel ]; then build_images; break; fi
done
cleanup
trap cleanup EXIT
for c in "${checks[@]}"; do
  # Every check ends with a result line: one that returns without any is
  # a failure too.
  n=${#DC_RESULTS[@]}
  "${check_fn[$c]}"
  [ ${#DC_RESULTS[@]} -gt "$n" ] || fail "$c" "${check_fn[$c]} returned without a result"
done
summary
exit $DC_FAILED
