#!/usr/bin/env python3
"""Runs a compose file with plain podman commands, one to one: each service
becomes one `podman run` whose flags come from that service's keys, in
depends_on order; named volumes are created first. podman-compose 1.0.3
(Debian 12) cannot run deploy/compose/compose.yaml (it has no
`network_mode: service:X` and ignores pids_limit), so scripts/deploy_check.sh
uses this instead. A key this script does not translate is an error, never
skipped: a change to compose.yaml either runs here or fails loudly.

  compose_podman.py up   FILE --project P [--image SVC=IMAGE]... [--skip SVC=WHY]...
                         [--clamp-ulimits]
  compose_podman.py down FILE --project P

--clamp-ulimits lowers a ulimit above this host's hard limit to that limit
(root in a container cannot raise it: nofile 65536 where the host allows
20000), with a "# note:" line each.

Container names are P-SERVICE-1 and volume names P_VOLUME, as docker
compose names them. Every podman command is printed before it runs.
"""
import argparse
import os
import shlex
import subprocess
import sys

import yaml

# Keys read here; "build" is satisfied by an image built beforehand.
KNOWN = {"image", "build", "restart", "network_mode", "depends_on", "ports", "volumes",
         "read_only", "cap_drop", "security_opt", "stop_signal", "stop_grace_period",
         "mem_limit", "pids_limit", "ulimits", "command", "environment"}


def seconds(v):
    v = str(v)
    for suffix, mult in (("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600)):
        if v.endswith(suffix) and v[: -len(suffix)].replace(".", "").isdigit():
            return int(float(v[: -len(suffix)]) * mult)
    return int(v)


def order(services):
    done, out = set(), []

    def visit(name, path=()):
        if name in done:
            return
        if name in path:
            sys.exit(f"compose: depends_on cycle at {name}")
        deps = services[name].get("depends_on", [])
        for d in (deps if isinstance(deps, list) else list(deps)):
            visit(d, path + (name,))
        done.add(name)
        out.append(name)

    for name in services:
        visit(name)
    return out


# /proc/<pid>/limits names of the ulimits compose files use.
PROC_LIMIT_NAMES = {"nofile": "Max open files", "nproc": "Max processes",
                    "core": "Max core file size", "memlock": "Max locked memory",
                    "stack": "Max stack size"}
_container_limits = {}


def host_hard_limit(key, image):
    """The hard limit a container gets here when podman sets none: the
    most runc can set (root in a container cannot raise it). Measured once
    with a container of IMAGE, as its /proc/self/limits."""
    if not _container_limits:
        r = subprocess.run(["podman", "run", "--rm", "--no-healthcheck", "--network", "none",
                            "--entrypoint", "cat", image, "/proc/self/limits"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"compose: cannot read a container's limits: {r.stderr.strip()}")
        for line in r.stdout.splitlines():
            for k, label in PROC_LIMIT_NAMES.items():
                if line.startswith(label):
                    v = line[len(label):].split()[1]
                    _container_limits[k] = int(v) if v.isdigit() else None
    return _container_limits.get(key)


def ulimit_args(name, ulimits, clamp, image):
    out = {}
    for key, v in (ulimits or {}).items():
        soft, hard = (int(v["soft"]), int(v["hard"])) if isinstance(v, dict) else (int(v), int(v))
        host = host_hard_limit(key, image) if clamp else None
        if host is not None and hard > host:
            print(f"# note: {name}: ulimit {key} {soft}:{hard} lowered to this host's hard "
                  f"limit {host}", flush=True)
            soft, hard = min(soft, host), host
        out[key] = (soft, hard)
    # Rootful podman adds nproc=1048576 to any --ulimit list without one,
    # which runc cannot set where the host's limit is lower.
    if clamp and out and "nproc" not in out:
        host = host_hard_limit("nproc", image)
        if host is not None and host < 1048576:
            print(f"# note: {name}: nproc {host}:{host} (podman would add 1048576 with --ulimit, "
                  f"above this host's hard limit)", flush=True)
            out["nproc"] = (host, host)
    return [x for k, (soft, hard) in out.items() for x in ("--ulimit", f"{k}={soft}:{hard}")]


def run_args(project, name, svc, image, compose_dir, volumes, clamp):
    unknown = set(svc) - KNOWN
    if unknown:
        sys.exit(f"compose: service {name}: keys {sorted(unknown)} are not translated "
                 f"(extend {os.path.basename(__file__)})")
    a = ["podman", "run", "-d", "--name", f"{project}-{name}-1",
         "--label", f"com.docker.compose.project={project}",
         "--label", f"com.docker.compose.service={name}"]
    if "restart" in svc:
        a += ["--restart", svc["restart"]]
    nm = svc.get("network_mode")
    if nm:
        if not nm.startswith("service:"):
            sys.exit(f"compose: service {name}: network_mode {nm} not translated")
        a += ["--network", f"container:{project}-{nm.split(':', 1)[1]}-1"]
    for p in svc.get("ports", []):
        a += ["-p", str(p)]
    for v in svc.get("volumes", []):
        src, _, rest = str(v).partition(":")
        if src.startswith((".", "/")):
            src = os.path.normpath(os.path.join(compose_dir, src))
        elif src in volumes:
            src = f"{project}_{src}"
        else:
            sys.exit(f"compose: service {name}: volume {src} is not declared")
        a += ["-v", f"{src}:{rest}"]
    if svc.get("read_only"):
        a.append("--read-only")
    for c in svc.get("cap_drop", []):
        a += ["--cap-drop", c]
    for s in svc.get("security_opt", []):
        a += ["--security-opt", s.replace("no-new-privileges:true", "no-new-privileges")]
    if "stop_signal" in svc:
        a += ["--stop-signal", svc["stop_signal"]]
    if "stop_grace_period" in svc:
        a += ["--stop-timeout", str(seconds(svc["stop_grace_period"]))]
    if "mem_limit" in svc:
        a += ["--memory", str(svc["mem_limit"])]
    if "pids_limit" in svc:
        a += ["--pids-limit", str(svc["pids_limit"])]
    a += ulimit_args(name, svc.get("ulimits"), clamp, image)
    env = svc.get("environment") or {}
    for k, v in (env.items() if isinstance(env, dict) else (e.split("=", 1) for e in env)):
        a += ["-e", f"{k}={os.path.expandvars(str(v))}"]
    a.append(image)
    cmd = svc.get("command", [])
    a += shlex.split(cmd) if isinstance(cmd, str) else [str(c) for c in cmd]
    return a


def sh(args, check=True):
    print("+ " + " ".join(shlex.quote(x) for x in args), flush=True)
    r = subprocess.run(args)
    if check and r.returncode != 0:
        sys.exit(f"compose: {' '.join(args[:3])} ... failed ({r.returncode})")
    return r.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("action", choices=["up", "down"])
    ap.add_argument("file")
    ap.add_argument("--project", required=True)
    ap.add_argument("--image", action="append", default=[], help="SERVICE=IMAGE")
    ap.add_argument("--skip", action="append", default=[], help="SERVICE=REASON")
    ap.add_argument("--clamp-ulimits", action="store_true")
    args = ap.parse_args()
    compose = yaml.safe_load(open(args.file))
    compose_dir = os.path.dirname(os.path.abspath(args.file))
    services = compose.get("services") or {}
    volumes = compose.get("volumes") or {}
    images = dict(i.split("=", 1) for i in args.image)
    skip = dict(s.split("=", 1) for s in args.skip)
    for s in list(images) + list(skip):
        if s not in services:
            sys.exit(f"compose: no service {s}")
    names = order(services)
    if args.action == "down":
        for name in reversed(names):
            sh(["podman", "rm", "-f", "-v", "-t", "30", f"{args.project}-{name}-1"], check=False)
        for v in volumes:
            sh(["podman", "volume", "rm", "-f", f"{args.project}_{v}"], check=False)
        return
    for name in names:
        for d in services[name].get("depends_on", []):
            if d in skip and name not in skip:
                sys.exit(f"compose: {name} depends on skipped {d}")
    for v in volumes:
        if subprocess.run(["podman", "volume", "exists", f"{args.project}_{v}"]).returncode != 0:
            sh(["podman", "volume", "create", f"{args.project}_{v}"])
    for name in names:
        if name in skip:
            print(f"# {name}: not run ({skip[name]})", flush=True)
            continue
        image = images.get(name, services[name].get("image"))
        sh(run_args(args.project, name, services[name], image, compose_dir, volumes,
                    args.clamp_ulimits))


if __name__ == "__main__":
    main()
