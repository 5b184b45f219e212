# scripts/deploy_check.sh, check 6: the Kubernetes manifests run by
# `podman kube play` (no cluster here). scripts/deploy_check/kube_manifests.py
# writes each layout as podman 4.3 can play it and lists every change it
# made; the result line carries that list. Checked:
#   6a sidecar-pod.yaml with its ConfigMap: gnmrd starts under the
#      manifest's security context and probes, a trainer (gnmr-synth) in
#      the pod gets decisions over the shared socket (steps before gnmrd
#      listens are counted misses: podman starts both at once)
#   6b gnmrd-deployment.yaml with its ConfigMap and both Secrets: gnmrd
#      reads the tokens from the secret volumes; a trainer in the pod's
#      network gets every decision over TCP with the job's token and is
#      refused with another
# Sourced.

KUBE_SIDE_STEPS=150
KUBE_FILES=()

kube_cleanup() {
  local f s v
  for f in "${KUBE_FILES[@]}"; do pm kube down "$f" >/dev/null 2>&1; done
  for c in gnmr-dc-kube-trainer gnmr-dc-kube-refused; do pm rm -f "$c" >/dev/null 2>&1; done
  for s in gnmrd-admin-token gnmrd-job-tokens; do pm secret rm "$s" >/dev/null 2>&1; done
  for v in gnmrd-sidecar-config gnmrd-job-config gnmrd-admin-token gnmrd-job-tokens; do
    pm volume rm -f "$v" >/dev/null 2>&1
  done
}

# kube_play NAME FILE: plays FILE; its output in $DC_WORK/kube/NAME.play.
kube_play() {
  KUBE_FILES+=("$2")
  pm kube play "$2" >"$DC_WORK/kube/$1.play" 2>&1 &&
    ! grep -qi '^error' "$DC_WORK/kube/$1.play"
}

kube_field() { json_get "$1" <<<"$2"; }

check_kube() {
  local dir=$DC_WORK/kube notes
  rm -rf "$dir" && mkdir -p "$dir"
  kube_cleanup
  # 6a: the sidecar layout.
  if ! notes=$(python3 scripts/deploy_check/kube_manifests.py sidecar "$dir/sidecar.yaml" \
      "$DC_IMAGE" "$DC_SYNTH_IMAGE" "$KUBE_SIDE_STEPS" 2>&1); then
    fail "6a kube play sidecar" "kube_manifests.py: $notes"; return 1
  fi
  local side_notes
  side_notes=$(paste -sd ';' <<<"$notes")
  if ! kube_play sidecar "$dir/sidecar.yaml"; then
    fail "6a kube play sidecar" "$(tail -3 "$dir/sidecar.play")"; kube_cleanup; return 1
  fi
  local trainer=gnmr-dc-kube-side-trainer gnmrd=gnmr-dc-kube-side-gnmrd out health
  if ! timeout 120 podman wait "$trainer" >"$dir/sidecar.rc" 2>&1; then
    fail "6a kube play sidecar" "the trainer did not end in 120 s"; kube_cleanup; return 1
  fi
  out=$(pm logs "$trainer" 2>/dev/null | grep '^{"rank"' | tail -1)
  # No systemd to schedule the probe (deploy/README.md): run it once.
  pm healthcheck run "$gnmrd" >/dev/null 2>&1
  health=$(pm inspect "$gnmrd" --format '{{.State.Health.Status}}' 2>/dev/null)
  local got missed rejected
  got=$(kube_field decisions_received "$out"); missed=$(kube_field missed_decisions "$out")
  rejected=$(kube_field decisions_rejected "$out")
  # Without the native sidecar's ordering the trainer may start before
  # gnmrd listens: its first steps train without decisions (fail-open,
  # counted as missed), never more than a few seconds' worth.
  if [ "$(cat "$dir/sidecar.rc")" = 0 ] && [ "$got" = "$KUBE_SIDE_STEPS" ] &&
     [ -n "$missed" ] && [ "$missed" -lt $(( KUBE_SIDE_STEPS / 2 )) ] && [ "$rejected" = 0 ] &&
     [ "$health" = healthy ]; then
    pass "6a kube play sidecar" "gnmrd $health (the manifest's startupProbe), trainer exit 0 with $got/$KUBE_SIDE_STEPS decisions, $missed missed before gnmrd listened (counted; the native sidecar would start it first), 0 rejected; changed for podman 4.3: $side_notes"
  else
    fail "6a kube play sidecar" "trainer rc $(cat "$dir/sidecar.rc"), decisions $got/$KUBE_SIDE_STEPS, missed $missed, rejected $rejected, gnmrd health '$health': $(pm logs "$gnmrd" 2>&1 | tail -2)"
  fi
  # kube play publishes the containerPorts on the host: 6b's gnmrd needs
  # 9464 too.
  pm kube down "$dir/sidecar.yaml" >/dev/null 2>&1
  # 6b: the per-job Deployment, its Secrets made out of band as
  # configmap.yaml says (here as podman secrets).
  local job_token admin_token
  job_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  admin_token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"gnmrd-admin-token"},"data":{"token":"%s"}}' \
    "$admin_token" >"$dir/admin.json"
  printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"gnmrd-job-tokens"},"data":{"tokens.yaml":"dc-kube-job: %s\\n"}}' \
    "$job_token" >"$dir/jobs.json"
  if ! notes=$(python3 scripts/deploy_check/kube_manifests.py job "$dir/job.yaml" "$DC_IMAGE" 2>&1) ||
     ! pm secret create gnmrd-admin-token "$dir/admin.json" >/dev/null ||
     ! pm secret create gnmrd-job-tokens "$dir/jobs.json" >/dev/null ||
     ! kube_play job "$dir/job.yaml"; then
    fail "6b kube play deployment" "$notes $(tail -3 "$dir/job.play" 2>/dev/null)"; kube_cleanup; return 1
  fi
  local pod=gnmr-dc-kube-job-pod-0 jgnmrd=gnmr-dc-kube-job-pod-0-gnmrd
  if ! wait_for 30 pm exec "$jgnmrd" /usr/local/bin/gnmrctl status --target unix:/run/gnmr/gnmrd.sock --timeout 1; then
    fail "6b kube play deployment" "gnmrd not ready: $(pm logs "$jgnmrd" 2>&1 | tail -2)"; kube_cleanup; return 1
  fi
  local good bad
  good=$(pm run --name gnmr-dc-kube-trainer --pod "$pod" "$DC_SYNTH_IMAGE" --target 127.0.0.1:7070 \
    --job dc-kube-job --rank 0 --world-size 1 --steps 60 --token "$job_token" --json 2>"$dir/good.err")
  bad=$(pm run --name gnmr-dc-kube-refused --pod "$pod" "$DC_SYNTH_IMAGE" --target 127.0.0.1:7070 \
    --job dc-kube-job --rank 0 --world-size 1 --steps 10 --decision-wait-ms 100 \
    --token "not-$job_token" --json 2>"$dir/bad.err")
  local g_got g_missed b_got
  g_got=$(kube_field decisions_received "$good"); g_missed=$(kube_field missed_decisions "$good")
  b_got=$(kube_field decisions_received "$bad")
  if [ "$g_got" = 60 ] && [ "$g_missed" = 0 ] && [ "$b_got" = 0 ] &&
     grep -q UNAUTHENTICATED "$dir/bad.err"; then
    pass "6b kube play deployment" "gnmrd read its config and both secret volumes; trainer over TCP with the job's token: 60/60 decisions, 0 missed; with another token: UNAUTHENTICATED, 0 decisions; changed for podman 4.3: $(paste -sd ';' <<<"$notes")"
  else
    fail "6b kube play deployment" "with token $g_got/60 decisions ($g_missed missed), without $b_got; $(tail -2 "$dir/bad.err")"
  fi
  kube_cleanup
}
