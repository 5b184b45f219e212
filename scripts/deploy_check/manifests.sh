# scripts/deploy_check.sh, check 5: the Kubernetes manifests through
# kubectl (Debian's kubernetes-client when none is installed). No cluster
# is reachable, and `kubectl apply --dry-run=client` still asks the API
# server for its resource list (it fails with "couldn't get current server
# API group list"), so what runs here is what kubectl does without one:
# `kubectl kustomize` builds the kustomization, and every manifest parses
# into Kubernetes objects (`kubectl annotate --local --dry-run=client`).
# Field-level checks stay in tests/deploy/check_deploy.py. Sourced.

check_manifests() {
  if ! command -v kubectl >/dev/null; then
    say "installing kubernetes-client (Debian's kubectl)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      kubernetes-client >>"$DC_WORK/apt.log" 2>&1 ||
      { fail "5 manifests" "apt-get install kubernetes-client failed"; return 1; }
  fi
  local bin version pkg
  bin=$(command -v kubectl)
  version=$(kubectl version --client 2>/dev/null | grep -o 'v[0-9][0-9.]*[^",]*' | head -1)
  pkg=$(dpkg -S "$bin" "$(readlink -f "$bin")" 2>/dev/null | head -1 | cut -d: -f1)
  local built n_kinds problems=() objects=0 f out
  if built=$(kubectl kustomize deploy/kubernetes 2>&1); then
    n_kinds=$(grep -c '^kind:' <<<"$built")
  else
    problems+=("kustomize: $(tail -1 <<<"$built")")
  fi
  for f in deploy/kubernetes/*.yaml; do
    [ "$(basename "$f")" = kustomization.yaml ] && continue
    local docs
    docs=$(python3 -c 'import sys, yaml; print(sum(1 for d in yaml.safe_load_all(open(sys.argv[1])) if d))' "$f")
    if out=$(kubectl annotate --local --dry-run=client -o name -f "$f" gnmr.io/deploy-check=1 2>&1) &&
       [ "$(grep -c / <<<"$out")" = "$docs" ]; then
      objects=$(( objects + docs ))
    else
      problems+=("$f: $(tail -1 <<<"$out")")
    fi
  done
  if [ ${#problems[@]} -eq 0 ]; then
    pass "5 kubernetes manifests" "kubectl $version (${pkg:-not from a package}): kustomization builds $n_kinds objects; all $objects objects of deploy/kubernetes/*.yaml parse; apply --dry-run needs an API server: none here"
  else
    fail "5 kubernetes manifests" "${problems[*]}"
  fi
}
