# scripts/deploy_check.sh, check 3: deploy/compose/compose.yaml run by
# compose_podman.py (plain podman commands, one per service, from the
# file's own keys): gnmrd, and Prometheus from Debian's package
# (deploy/compose/prometheus.Dockerfile) in place of prom/prometheus, with
# deploy/prometheus/ mounted unchanged. Grafana is not run: Debian has no
# package and no registry is reachable (the dashboards' queries are checked
# against a real Prometheus by tests/observability, prometheus_e2e.py). A
# trainer joins through the volume gnmr-run and puts a NaN in a gradient:
# Prometheus scrapes gnmrd inside the stack and GnmrNonFiniteGradients
# fires. Sourced.

COMPOSE_JOB=dc-nan
COMPOSE_NAN_STEP=450   # 45 s in: after Prometheus' first scrape (15 s interval)

compose_ctl() {
  python3 scripts/deploy_check/compose_podman.py "$1" deploy/compose/compose.yaml --project gnmr-dc \
    --image "prometheus=$DC_PROM_IMAGE" \
    --skip "grafana=no Grafana image: not packaged in Debian, no registry" --clamp-ulimits \
    >>"$DC_WORK/compose/podman.txt" 2>&1
}

# prom_query EXPR: the first sample's value, or nothing.
prom_get() { python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"; }
prom_query() {
  prom_get "http://127.0.0.1:9090/api/v1/query?query=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1]))' "$1")" |
    python3 -c 'import json,sys; r=json.load(sys.stdin)["data"]["result"]; print(r[0]["value"][1] if r else "")'
}
prom_has() { [ -n "$(prom_query "$1")" ]; }
prom_ready() { prom_get http://127.0.0.1:9090/-/ready; }
nonfinite_firing() {
  prom_get http://127.0.0.1:9090/api/v1/alerts | python3 -c '
import json, sys
a = [x for x in json.load(sys.stdin)["data"]["alerts"]
     if x["labels"].get("alertname") == "GnmrNonFiniteGradients" and x["state"] == "firing"]
print(json.dumps(a[0]["labels"]) if a else "")
sys.exit(0 if a else 1)'
}

check_compose() {
  local dir=$DC_WORK/compose trainer=gnmr-dc-compose-trainer
  rm -rf "$dir" && mkdir -p "$dir"
  if ss -ltn 2>/dev/null | grep -E '127\.0\.0\.1:(9090|3000) ' >/dev/null; then
    fail "3 compose" "127.0.0.1:9090 or :3000 (published by compose.yaml) is taken on this host"
    return 1
  fi
  local t0; t0=$(now_ms)
  compose_ctl up || { fail "3 compose up" "$(tail -3 "$dir/podman.txt")"; return 1; }
  say "compose.yaml as podman commands: $(grep -c '^+ podman run' "$dir/podman.txt") containers ($dir/podman.txt)"
  grep '^# ' "$dir/podman.txt" | while read -r line; do say "compose: ${line#\# }"; done
  wait_for 60 prom_ready || { fail "3 prometheus" "not ready: $(pm logs gnmr-dc-prometheus-1 2>&1 | tail -3)"; return 1; }
  # Scraped inside the stack: gnmrd's /metrics on the shared loopback.
  if wait_for 60 prom_has 'up{job="gnmrd"} == 1'; then
    pass "3a prometheus scrapes gnmrd" "up{job=\"gnmrd\"} == 1 (127.0.0.1:9464 in gnmrd's network namespace), $(( ($(now_ms) - t0) / 1000 )) s after up"
  else
    fail "3a prometheus scrapes gnmrd" "no successful scrape in 60 s: $(prom_query 'up')"; return 1
  fi
  pm run -d --name "$trainer" --user 20001:20001 --group-add 10001 -v gnmr-dc_gnmr-run:/run/gnmr \
    "$DC_SYNTH_IMAGE" --target unix:/run/gnmr/gnmrd.sock --job "$COMPOSE_JOB" --rank 0 \
    --world-size 1 --steps 1200 --step-ms 100 --nan "$COMPOSE_NAN_STEP:1" >/dev/null ||
    { fail "3 trainer" "podman run failed"; return 1; }
  local t_trainer; t_trainer=$(now_ms)
  local zero="gnmr_admissions_total{job_id=\"$COMPOSE_JOB\",trigger=\"nonfinite\",action=\"promote\"}"
  if ! wait_for 40 prom_has "$zero == 0"; then
    fail "3b alert" "the job's nonfinite counter was not scraped at 0 within 40 s (before the NaN)"; return 1
  fi
  local zero_s=$(( ($(now_ms) - t_trainer) / 1000 ))
  local labels
  if labels=$(wait_for 120 nonfinite_firing && nonfinite_firing); then
    pass "3b non-finite alert" "GnmrNonFiniteGradients firing ${labels}, ~$(( ($(now_ms) - t_trainer) / 1000 - COMPOSE_NAN_STEP / 10 )) s after the NaN at step $COMPOSE_NAN_STEP (the counter scraped at 0 ${zero_s} s after the trainer started)"
  else
    fail "3b non-finite alert" "not firing 120 s after the NaN; counter $(prom_query "sum($zero)")"
  fi
  # Every rule of deploy/prometheus/gnmr.rules.yml evaluated without error.
  local rules
  rules=$(prom_get http://127.0.0.1:9090/api/v1/rules | python3 -c '
import json, sys
rs = [r for g in json.load(sys.stdin)["data"]["groups"] for r in g["rules"]]
bad = [r["name"] + ": " + r.get("lastError", r.get("health", "?")) for r in rs if r.get("health") != "ok"]
print(f"{len(rs)} rules, all evaluated without error" if rs and not bad else f"{len(rs)} rules; not ok: {bad}")
sys.exit(1 if bad or not rs else 0)') &&
    pass "3c alert rules" "$rules" || fail "3c alert rules" "$rules"
  pm rm -f -v "$trainer" >/dev/null 2>&1
  compose_ctl down
}
