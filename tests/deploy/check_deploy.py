#!/usr/bin/python3
"""Static checks of deploy/ (no Docker engine or cluster needed).

Every YAML file parses (multi-document); Kubernetes manifests have
apiVersion, kind and metadata.name; every gnmrd config deploy/ ships is
safe as shipped (a TCP listener has job tokens or mutual TLS, never
insecure_tcp; /metrics on loopback except where a Kubernetes monitor
scrapes it), and no Secret with a token is shipped; the sidecar pod shares
/run/gnmr between gnmrd and the trainer through an emptyDir and the
trainer's target is gnmrd's socket; the ports in each pod's gnmrd.yaml, the
container ports, the Service, the NetworkPolicy, the monitors, the
Dockerfile and the compose file agree;
gnmrd containers are non-root with a read-only root filesystem and
resources; selectors match their pods; the Dockerfile's COPY sources exist,
its user is not root and its runtime packages exist (apt-cache, when
present); the compose file's mounts exist. Exit 77 when PyYAML is missing.

With BINARY arguments (the built gnmrd and gnmrctl), every shared library
they load must come from a runtime package or one of its dependencies
(ldd, dpkg -S, apt-cache depends), so the slim image can run them.

Usage: check_deploy.py REPO_ROOT [BINARY...]
"""
import os
import re
import shlex
import shutil
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("SKIP: python3 yaml module missing (Debian: python3-yaml)")
    sys.exit(77)

ROOT = os.path.abspath(sys.argv[1])
DEPLOY = os.path.join(ROOT, "deploy")
errors = []


def fail(msg):
    errors.append(msg)
    print("FAIL:", msg)


def rel(path):
    return os.path.relpath(path, ROOT)


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def port_of(addr):
    """'0.0.0.0:7070' -> 7070; 'unix:...' -> None."""
    if addr.startswith("unix:"):
        return None
    return int(addr.rsplit(":", 1)[1])


# 1. Every YAML file parses.
docs_by_file = {}
for dirpath, _, files in os.walk(DEPLOY):
    for name in sorted(files):
        if name.endswith((".yaml", ".yml")):
            path = os.path.join(dirpath, name)
            try:
                docs_by_file[rel(path)] = load_all(path)
            except yaml.YAMLError as e:
                fail(f"{rel(path)}: {e}")
print(f"parsed {len(docs_by_file)} YAML files")

# 2. Kubernetes manifests.
K8S = "deploy/kubernetes"
manifests = []  # (file, doc)
for path, docs in docs_by_file.items():
    if not path.startswith(K8S + "/") or path.endswith("kustomization.yaml"):
        continue
    for d in docs:
        for key in ("apiVersion", "kind"):
            if not d.get(key):
                fail(f"{path}: a document without {key}")
        if not (d.get("metadata") or {}).get("name"):
            fail(f"{path}: {d.get('kind')} without metadata.name")
        manifests.append((path, d))


def find(kind, name=None):
    out = [d for _, d in manifests if d.get("kind") == kind and
           (name is None or d["metadata"]["name"] == name)]
    if not out:
        fail(f"{K8S}: no {kind} {name or ''}")
    return out


kust = docs_by_file.get(K8S + "/kustomization.yaml", [{}])[0]
for r in kust.get("resources", []):
    if not os.path.exists(os.path.join(ROOT, K8S, r)):
        fail(f"kustomization.yaml: resource {r} missing")

def tcp_listeners(cfg):
    return [a for a in cfg.get("listen", []) if not a.startswith("unix:")]


def check_gnmrd_config(where, cfg, metrics_scraped_from_outside):
    """A shipped gnmrd config is safe as shipped (deploy/README.md, "Security model")."""
    tcp = tcp_listeners(cfg)
    tls = cfg.get("tls") or {}
    if cfg.get("insecure_tcp"):
        fail(f"{where}: insecure_tcp is set in a shipped config")
    if tcp and not (cfg.get("job_tokens") or cfg.get("job_tokens_file") or tls.get("client_ca")):
        fail(f"{where}: TCP listener {tcp} without job tokens or mutual TLS")
    if tcp and cfg.get("allow_unregistered_jobs", True) and not tls.get("client_ca"):
        fail(f"{where}: TCP listener {tcp} with allow_unregistered_jobs (set it false)")
    if tcp and not (cfg.get("admin_token_file") or cfg.get("read_token_file")):
        fail(f"{where}: TCP listener {tcp} without an admin or read token file")
    for key in ("admin_token", "read_token"):
        if cfg.get(key):
            fail(f"{where}: a literal {key} in a shipped config")
    if cfg.get("job_tokens"):
        fail(f"{where}: literal job_tokens in a shipped config (use job_tokens_file)")
    metrics = (cfg.get("metrics") or {}).get("listen", "127.0.0.1:9464")
    loopback = metrics.startswith("127.") or metrics.startswith("localhost:") or metrics == "off"
    if metrics_scraped_from_outside and loopback:
        fail(f"{where}: metrics on loopback cannot be scraped from outside the pod")
    if not metrics_scraped_from_outside and not loopback:
        fail(f"{where}: metrics on {metrics}: shipped configs keep it on loopback")


# Every gnmrd config deploy/ ships, outside Kubernetes.
for path in ("deploy/systemd/gnmrd.yaml", "deploy/container/gnmrd.yaml"):
    check_gnmrd_config(path, docs_by_file.get(path, [{}])[0] or {}, False)

# The ConfigMaps holding a gnmrd.yaml, by name.
gnmrd_cfgs = {}
for _, d in manifests:
    if d.get("kind") == "ConfigMap" and "gnmrd.yaml" in (d.get("data") or {}):
        name = d["metadata"]["name"]
        gnmrd_cfgs[name] = yaml.safe_load(d["data"]["gnmrd.yaml"]) or {}
        check_gnmrd_config(f"ConfigMap {name}", gnmrd_cfgs[name], True)
if not gnmrd_cfgs:
    fail(f"{K8S}: no ConfigMap with a gnmrd.yaml")
for _, d in manifests:
    if d.get("kind") == "Secret" and (d.get("data") or d.get("stringData")):
        fail(f"Secret {d['metadata']['name']}: a token shipped in the repository")
for name, cfg in gnmrd_cfgs.items():
    sockets = [a[len("unix:"):] for a in cfg.get("listen", []) if a.startswith("unix:")]
    if sockets != ["/run/gnmr/gnmrd.sock"]:
        fail(f"ConfigMap {name}: unix sockets {sockets}, expected /run/gnmr/gnmrd.sock")
    if len({port_of(a) for a in tcp_listeners(cfg)}) > 1:
        fail(f"ConfigMap {name}: more than one TCP port")
SOCKET = "/run/gnmr/gnmrd.sock"
print(f"gnmrd configs in Kubernetes: {sorted(gnmrd_cfgs)}")


def pod_spec(d):
    return d["spec"]["template"]["spec"] if d["kind"] == "Deployment" else d["spec"]


def containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def check_gnmrd_container(where, spec, c):
    """The gnmrd container against the config it mounts; returns that config."""
    mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
    vols = {v["name"]: v for v in spec.get("volumes", [])}
    for path in ("/run/gnmr", "/var/lib/gnmr", "/etc/gnmr/gnmrd.yaml"):
        if path not in mounts:
            fail(f"{where}: gnmrd does not mount {path} (read-only root filesystem)")
    cfg_name = vols.get(mounts.get("/etc/gnmr/gnmrd.yaml"), {}).get("configMap", {}).get("name")
    if cfg_name not in gnmrd_cfgs:
        fail(f"{where}: /etc/gnmr/gnmrd.yaml is not one of the gnmrd ConfigMaps {sorted(gnmrd_cfgs)}")
    cfg = gnmrd_cfgs.get(cfg_name, {})
    grpc = {port_of(a) for a in tcp_listeners(cfg)}
    metrics = port_of((cfg.get("metrics") or {}).get("listen", "127.0.0.1:9464"))
    ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
    expected = {"metrics": metrics}
    if grpc:
        expected["grpc"] = next(iter(grpc))
    if ports != expected:
        fail(f"{where}: gnmrd ports {ports}, its config ({cfg_name}) listens on {expected}")
    sc = dict(spec.get("securityContext", {}))
    sc.update(c.get("securityContext", {}))
    if sc.get("runAsNonRoot") is not True:
        fail(f"{where}: gnmrd without runAsNonRoot")
    if sc.get("runAsUser") in (None, 0):
        fail(f"{where}: gnmrd without a non-zero runAsUser")
    if c.get("securityContext", {}).get("readOnlyRootFilesystem") is not True:
        fail(f"{where}: gnmrd without readOnlyRootFilesystem")
    if c.get("securityContext", {}).get("allowPrivilegeEscalation") is not False:
        fail(f"{where}: gnmrd allows privilege escalation")
    res = c.get("resources", {})
    if not res.get("requests") or not res.get("limits", {}).get("memory"):
        fail(f"{where}: gnmrd without resource requests and a memory limit")
    for key in ("admin_token_file", "job_tokens_file", "read_token_file"):
        path = cfg.get(key)
        if not path:
            continue
        mount = next((p for p in mounts if path.startswith(p.rstrip("/") + "/")), None)
        if mount is None:
            fail(f"{where}: {key} {path} is not mounted")
        elif "secret" not in vols.get(mounts[mount], {}):
            fail(f"{where}: {key} {path} is not from a Secret")
    probes = [c.get(k) for k in ("startupProbe", "readinessProbe", "livenessProbe")]
    for p in filter(None, probes):
        cmd = p.get("exec", {}).get("command", [])
        if "unix:" + SOCKET not in cmd:
            fail(f"{where}: probe {cmd} does not ask gnmrd's socket")
    return cfg, mounts, vols


# The sidecar pod.
for pod in find("Pod"):
    where = f"Pod {pod['metadata']['name']}"
    spec = pod["spec"]
    cs = {c["name"]: c for c in containers(spec)}
    if "gnmrd" not in cs or len(cs) < 2:
        fail(f"{where}: expected a gnmrd container and a trainer")
        continue
    _, mounts, vols = check_gnmrd_container(where, spec, cs["gnmrd"])
    run_vol = mounts.get("/run/gnmr")
    if "emptyDir" not in vols.get(run_vol, {}):
        fail(f"{where}: /run/gnmr is not an emptyDir")
    for name, c in cs.items():
        if name == "gnmrd":
            continue
        cm_ = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        socket_dir = os.path.dirname(SOCKET)
        if cm_.get(socket_dir) != run_vol:
            fail(f"{where}: {name} does not mount the socket volume at {socket_dir}")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        if env.get("GNMR_TARGET") != "unix:" + SOCKET:
            fail(f"{where}: {name}'s GNMR_TARGET {env.get('GNMR_TARGET')} is not gnmrd's socket")
    # The socket is 0660, group = gnmrd's group: the trainer must be in it.
    gid = spec.get("securityContext", {}).get("supplementalGroups", [])
    gnmrd_gid = cs["gnmrd"].get("securityContext", {}).get("runAsGroup")
    if gnmrd_gid not in gid:
        fail(f"{where}: supplementalGroups {gid} lacks gnmrd's group {gnmrd_gid}")
    pod_labels = pod["metadata"].get("labels", {})
    for pm in find("PodMonitor"):
        sel = pm["spec"]["selector"]["matchLabels"]
        if any(pod_labels.get(k) != v for k, v in sel.items()):
            fail(f"PodMonitor {pm['metadata']['name']}: selector {sel} misses {where}")
        for ep in pm["spec"]["podMetricsEndpoints"]:
            if ep.get("port") not in {p["name"] for p in cs["gnmrd"].get("ports", [])}:
                fail(f"PodMonitor: port {ep.get('port')} is not a gnmrd container port")

# The per-job Deployment and its Service.
for dep in find("Deployment"):
    where = f"Deployment {dep['metadata']['name']}"
    spec = pod_spec(dep)
    tmpl_labels = dep["spec"]["template"]["metadata"]["labels"]
    sel = dep["spec"]["selector"]["matchLabels"]
    if any(tmpl_labels.get(k) != v for k, v in sel.items()):
        fail(f"{where}: selector does not match its pods")
    if dep["spec"].get("replicas") != 1:
        fail(f"{where}: one gnmrd per job (replicas 1)")
    cs = {c["name"]: c for c in containers(spec)}
    if "gnmrd" not in cs:
        fail(f"{where}: no gnmrd container")
        continue
    dep_cfg, _, _ = check_gnmrd_container(where, spec, cs["gnmrd"])
    pod_ports = {p["name"]: p["containerPort"] for p in cs["gnmrd"].get("ports", [])}
    if not tcp_listeners(dep_cfg):
        fail(f"{where}: the per-job daemon has no TCP listener for ranks in other pods")
    # The NetworkPolicy: selects these pods and admits their ports only.
    for np_ in find("NetworkPolicy"):
        psel = np_["spec"]["podSelector"].get("matchLabels", {})
        if any(tmpl_labels.get(k) != v for k, v in psel.items()):
            fail(f"NetworkPolicy {np_['metadata']['name']}: podSelector misses {where}")
        if "Ingress" not in np_["spec"].get("policyTypes", []):
            fail(f"NetworkPolicy {np_['metadata']['name']}: no Ingress policy")
        allowed = {p.get("port") for rule in np_["spec"].get("ingress", [])
                   for p in rule.get("ports", [])}
        if allowed != set(pod_ports.values()):
            fail(f"NetworkPolicy: ingress ports {allowed}, gnmrd's are {set(pod_ports.values())}")
        for rule in np_["spec"].get("ingress", []):
            if not rule.get("from"):
                fail("NetworkPolicy: an ingress rule open to every source")
    for svc in find("Service"):
        if any(tmpl_labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
            fail(f"Service {svc['metadata']['name']}: selector misses {where}")
        names = set()
        for p in svc["spec"]["ports"]:
            names.add(p["name"])
            tp = p.get("targetPort", p["port"])
            if (pod_ports.get(tp) if isinstance(tp, str) else tp) is None:
                fail(f"Service: targetPort {tp} is not a gnmrd port")
        if names != {"grpc", "metrics"}:
            fail(f"Service: ports {names}, expected grpc and metrics")
        for sm in find("ServiceMonitor"):
            ssel = sm["spec"]["selector"]["matchLabels"]
            if any(svc["metadata"].get("labels", {}).get(k) != v for k, v in ssel.items()):
                fail(f"ServiceMonitor: selector {ssel} misses Service {svc['metadata']['name']}")
            for ep in sm["spec"]["endpoints"]:
                if ep.get("port") not in names:
                    fail(f"ServiceMonitor: port {ep.get('port')} is not a Service port")
for kind in ("PodMonitor", "ServiceMonitor"):
    for m in find(kind):
        if m["apiVersion"] != "monitoring.coreos.com/v1":
            fail(f"{kind}: apiVersion {m['apiVersion']}")

# 3. The Dockerfile.
dockerfile = os.path.join(DEPLOY, "container", "Dockerfile")
text = open(dockerfile).read().replace("\\\n", " ")
lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
stages = [l for l in lines if l.upper().startswith("FROM ")]
if len(stages) < 2:
    fail("Dockerfile: expected a multi-stage build")
for l in lines:
    word = l.split()[0].upper()
    if word in ("COPY", "ADD") and "--from=" not in l:
        for src in shlex.split(l)[1:-1]:
            if not src.startswith("--") and not os.path.exists(os.path.join(ROOT, src)):
                fail(f"Dockerfile: COPY source {src} missing")
users = [l.split()[1] for l in lines if l.upper().startswith("USER ")]
if not users or users[-1].split(":")[0] in ("root", "0"):
    fail(f"Dockerfile: the final USER is {users[-1] if users else 'root'}")
if not any(l.upper().startswith("HEALTHCHECK ") and "gnmrctl" in l for l in lines):
    fail("Dockerfile: no HEALTHCHECK with gnmrctl")
# The image listens where its config says (the baked one: the socket only,
# checked above); EXPOSE documents the ports a mounted config uses in
# Kubernetes, and the CMD adds no listener of its own.
k8s_ports = set()
for cfg in gnmrd_cfgs.values():
    k8s_ports |= {port_of(a) for a in tcp_listeners(cfg)}
    k8s_ports.add(port_of((cfg.get("metrics") or {}).get("listen", "127.0.0.1:9464")))
expose = {int(p) for l in lines if l.upper().startswith("EXPOSE ") for p in l.split()[1:]}
cmd = next((l for l in lines if l.upper().startswith("CMD ")), "")
if not expose <= k8s_ports:
    fail(f"Dockerfile: EXPOSE {expose}, the Kubernetes configs listen on {k8s_ports}")
if "--listen" in cmd or "--metrics" in cmd:
    fail(f"Dockerfile: CMD sets listeners ({cmd}); the config file should")
container_cfg = docs_by_file.get("deploy/container/gnmrd.yaml", [{}])[0] or {}
if "unix:" + SOCKET not in container_cfg.get("listen", []):
    fail(f"deploy/container/gnmrd.yaml does not listen on unix:{SOCKET}")
# Runtime packages (the last stage's apt-get install).
runtime = text[text.rfind("\nFROM "):]
m = re.search(r"apt-get install -y --no-install-recommends(.*?)&&", runtime, re.S)
pkgs = m.group(1).split() if m else []
if not pkgs:
    fail("Dockerfile: no runtime apt-get install")
if shutil.which("apt-cache"):
    for p in pkgs:
        r = subprocess.run(["apt-cache", "show", "--no-all-versions", p],
                           capture_output=True, text=True)
        if r.returncode != 0 or not r.stdout.strip():
            fail(f"Dockerfile: runtime package {p} unknown to apt-cache")
    print(f"runtime packages known to apt: {' '.join(pkgs)}")
    binaries = sys.argv[2:]
    if binaries and shutil.which("ldd") and shutil.which("dpkg"):
        r = subprocess.run(["apt-cache", "depends", "--recurse", "--no-recommends",
                            "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces",
                            "--no-enhances", "--installed"] + pkgs,
                           capture_output=True, text=True)
        provided = set(pkgs) | {l.split(":")[-1].strip().strip("<>").split(":")[0]
                                for l in r.stdout.splitlines()}
        provided = {p.split(":")[0] for p in provided}
        for b in binaries:
            libs = set()
            for l in subprocess.run(["ldd", b], capture_output=True, text=True).stdout.splitlines():
                parts = l.split("=>")
                if len(parts) == 2 and parts[1].strip().startswith("/"):
                    libs.add(os.path.realpath(parts[1].split()[0]))
            # One dpkg -S for all; usrmerge: dpkg may know /lib/... for /usr/lib/...
            names = {}
            for lib in libs:
                names[lib] = lib
                names[lib.replace("/usr/lib/", "/lib/", 1)] = lib
            owners = {}
            r = subprocess.run(["dpkg", "-S"] + sorted(names), capture_output=True, text=True)
            for l in r.stdout.splitlines():
                pkg, _, path = l.partition(": ")
                if path in names:
                    owners[names[path]] = pkg.split(":")[0]
            own_dir = os.environ.get("GNMR_OWN_LIB_DIR")
            own = {lib for lib in libs if own_dir and os.path.basename(lib).startswith("libgnmr_")
                   and lib.startswith(os.path.realpath(own_dir) + os.sep)}
            if own:
                print(f"{os.path.basename(b)}: gnmr's own shared libraries (GNMR_SHARED): "
                      f"{' '.join(sorted(os.path.basename(l) for l in own))}")
            for lib in sorted(libs - own):
                pkg = owners.get(lib)
                if not pkg:
                    fail(f"{b}: {lib} belongs to no Debian package")
                elif pkg not in provided:
                    fail(f"Dockerfile: {os.path.basename(b)} loads {lib} from {pkg}, "
                         f"which the runtime packages do not pull in")
            print(f"{os.path.basename(b)}: {len(libs)} shared libraries, all from the runtime "
                  f"packages or their dependencies")
else:
    print("note: no apt-cache, runtime package names not checked")
if not os.path.exists(os.path.join(ROOT, ".dockerignore")):
    fail(".dockerignore missing")

# 4. The compose file.
compose = docs_by_file.get("deploy/compose/compose.yaml", [{}])[0]
services = compose.get("services", {})
for name in ("gnmrd", "prometheus", "grafana"):
    if name not in services:
        fail(f"compose.yaml: no service {name}")
cdir = os.path.join(DEPLOY, "compose")
build = services.get("gnmrd", {}).get("build", {})
if not os.path.exists(os.path.join(cdir, build.get("context", "."), build.get("dockerfile", ""))):
    fail("compose.yaml: gnmrd's build context / Dockerfile missing")
published = set()
for p in services.get("gnmrd", {}).get("ports", []):
    host_ip, host_port, container_port = p.split(":")
    if host_ip != "127.0.0.1":
        fail(f"compose.yaml: port {p} published beyond the host's loopback")
    published.add(int(container_port))
# gnmrd listens on no TCP port in compose (the image's config), so only
# Prometheus' and Grafana's ports are published.
if published & k8s_ports:
    fail(f"compose.yaml: publishes gnmrd ports {published & k8s_ports}, on which the "
         "image's config does not listen")
metrics_port = port_of((container_cfg.get("metrics") or {}).get("listen", "127.0.0.1:9464"))
pending = []
for name, svc in services.items():
    for v in svc.get("volumes", []):
        src = v.split(":")[0]
        if src.startswith("."):
            path = os.path.normpath(os.path.join(cdir, src))
            if not os.path.exists(path):
                msg = f"compose.yaml: {name} mounts {src}, missing"
                if rel(path).startswith("dashboards"):
                    pending.append(msg)
                else:
                    fail(msg)
prom = os.path.join(DEPLOY, "prometheus", "prometheus.yml")
if os.path.exists(prom):
    pcfg = load_all(prom)[0]
    targets = [t for sc in pcfg.get("scrape_configs", []) for s in sc.get("static_configs", [])
               for t in s.get("targets", [])]
    # Prometheus shares gnmrd's network namespace in compose.
    if services.get("prometheus", {}).get("network_mode") == "service:gnmrd" and \
            f"127.0.0.1:{metrics_port}" not in targets and f"localhost:{metrics_port}" not in targets:
        fail(f"compose: prometheus.yml targets {targets} miss gnmrd's 127.0.0.1:{metrics_port}")
# Grafana's provisioning, as mounted: the dashboards provider's path is a
# mount, and the datasource is reachable from Grafana's network namespace.
graf = services.get("grafana", {})
mounts = {v.split(":")[1]: os.path.normpath(os.path.join(cdir, v.split(":")[0]))
          for v in graf.get("volumes", []) if v.startswith(".")}
prov = mounts.get("/etc/grafana/provisioning")
if prov and os.path.isdir(prov):
    for dirpath, _, files in os.walk(prov):
        for name in files:
            if not name.endswith((".yaml", ".yml")):
                continue
            pdoc = load_all(os.path.join(dirpath, name))[0] or {}
            for pr in pdoc.get("providers", []):
                path = pr.get("options", {}).get("path", "")
                if not any(path == m or path.startswith(m + "/") for m in mounts):
                    fail(f"compose.yaml: Grafana provider path {path} is not mounted")
                elif path in mounts and not any(f.endswith(".json")
                                                for f in os.listdir(mounts[path])):
                    fail(f"compose.yaml: no dashboards (*.json) at {path}")
            for ds in pdoc.get("datasources", []):
                url = ds.get("url", "")
                shared = graf.get("network_mode") == "service:gnmrd" and \
                    services.get("prometheus", {}).get("network_mode") == "service:gnmrd"
                if not (shared and re.match(r"https?://(127\.0\.0\.1|localhost):9090", url)) \
                        and "prometheus:9090" not in url:
                    fail(f"compose.yaml: Grafana datasource {url} does not reach Prometheus")
    print("Grafana provisioning: provider paths mounted, datasource reachable")
for p in pending:
    print("note (dashboards/ is another engineer's, not there yet):", p)

if errors:
    print(f"{len(errors)} problem(s)")
    sys.exit(1)
print("OK")
