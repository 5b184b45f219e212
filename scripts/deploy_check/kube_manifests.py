#!/usr/bin/env python3
"""The Kubernetes manifests of deploy/kubernetes as `podman kube play` (4.3,
Debian 12's) can run them, for scripts/deploy_check.sh check 6.

Writes the play file for one layout and prints, one per line, every change
it made and why: what kube play cannot run is listed, never dropped
quietly. Nothing else is changed (security contexts, probes, volumes,
ConfigMaps and the gnmrd config are the shipped ones).

  kube_manifests.py sidecar OUT.yaml GNMRD_IMAGE TRAINER_IMAGE STEPS
  kube_manifests.py job OUT.yaml GNMRD_IMAGE
"""
from __future__ import annotations

import sys

import yaml

KUBE = "deploy/kubernetes"


def load(name):
    with open(f"{KUBE}/{name}") as f:
        return [d for d in yaml.safe_load_all(f) if d]


def configmap(name):
    return next(d for d in load("configmap.yaml") if d["metadata"]["name"] == name)


def sub_path_mounts(container, notes, conflicts=False):
    """podman 4.3 mounts a configMap volume as a directory even with
    subPath: the file's directory gets the whole volume instead."""
    for m in container.get("volumeMounts", []):
        if not m.get("subPath"):
            continue
        path, sub = m["mountPath"], m.pop("subPath")
        directory = path.rsplit("/", 1)[0]
        if conflicts:  # other volumes mount below that directory
            directory += "/config"
        m["mountPath"] = directory
        args = container.get("args", [])
        container["args"] = [f"{directory}/{sub}" if a == path else a for a in args]
        notes.append(f"{container['name']}: volume {m['name']} subPath {sub} at {path} -> "
                     f"the directory {directory} (podman 4.3 ignores subPath for configMap "
                     "volumes)")


def sidecar(out, gnmrd_image, trainer_image, steps):
    notes = []
    pod = load("sidecar-pod.yaml")[0]
    spec = pod["spec"]
    pod["metadata"]["name"] = "gnmr-dc-kube-side"
    spec["restartPolicy"] = "Never"
    notes.append("pod restartPolicy Never (default Always): the trainer here is a finite run")
    # A native sidecar (init container with restartPolicy Always, Kubernetes
    # >= 1.29): podman 4.3 refuses init containers with probes.
    init = spec.pop("initContainers")
    for c in init:
        c.pop("restartPolicy", None)
        c["image"] = gnmrd_image
        sub_path_mounts(c, notes)
    notes.append("gnmrd: init container with restartPolicy Always (native sidecar) -> a "
                 "regular container, as the manifest says for older clusters (podman 4.3 "
                 "refuses init containers with probes)")
    for c in spec["containers"]:
        c["image"] = trainer_image
        c["command"] = ["/usr/local/bin/gnmr-synth"]
        c["args"] = ["--target", "unix:/run/gnmr/gnmrd.sock", "--job", "dc-kube-side",
                     "--rank", "0", "--world-size", "1", "--steps", str(steps),
                     "--step-ms", "20", "--spike", "60:3:50", "--json"]
        c.pop("resources", None)
        notes.append("trainer: image and command -> gnmr-synth (the manifest's is a "
                     "placeholder); its resources (8 CPUs, 64Gi) dropped")
    spec["containers"] = init + spec["containers"]
    notes.append(f"images -> {gnmrd_image}, {trainer_image} (local builds)")
    write(out, [configmap("gnmrd-sidecar-config"), pod])
    return notes


def job(out, gnmrd_image):
    notes = []
    dep = next(d for d in load("gnmrd-deployment.yaml") if d["kind"] == "Deployment")
    dep["metadata"]["name"] = "gnmr-dc-kube-job"
    spec = dep["spec"]["template"]["spec"]
    for c in spec["containers"]:
        c["image"] = gnmrd_image
        c.pop("resources", None)
        sub_path_mounts(c, notes, conflicts=True)
    notes.append(f"image -> {gnmrd_image} (local build); resources dropped")
    for v in spec["volumes"]:
        if "secret" in v:
            v["secret"]["optional"] = False
    notes.append("secret volumes: optional: false written out (podman 4.3 dereferences the "
                 "unset field and panics); the Secrets are podman secrets made by the check "
                 "(podman 4.3 writes a kube Secret's data still base64-encoded)")
    notes.append("Service, NetworkPolicy, ServiceMonitor: not run (kube play has no "
                 "Service routing or policy); the trainer joins the pod's network instead")
    write(out, [configmap("gnmrd-job-config"), dep])
    return notes


def write(out, docs):
    with open(out, "w") as f:
        yaml.safe_dump_all(docs, f, sort_keys=False)


def main(argv):
    if len(argv) < 3 or argv[1] in ("-h", "--help"):
        print(__doc__)
        return 0 if len(argv) > 1 and argv[1] in ("-h", "--help") else 2
    if argv[1] == "sidecar" and len(argv) == 6:
        notes = sidecar(argv[2], argv[3], argv[4], int(argv[5]))
    elif argv[1] == "job" and len(argv) == 4:
        notes = job(argv[2], argv[3])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print("\n".join(notes))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
