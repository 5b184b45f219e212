#!/usr/bin/python3
"""Checks that every #include points down the layer order of
docs/architecture.md, never up or sideways into another layer's private
files. Run by ctest (include_layers); exits 1 listing each violation.

    scripts/check_layers.py [--root DIR]    # check the tree
    scripts/check_layers.py --self-test     # plants violations, expects them found

A file's layer is its top folder (for daemon/ and programs/ its second
folder; controller/types/ and controller/publish/ are layers of their own
inside controller/); an include's layer is found from its path. A layer may include its own files
and the public headers (see PUBLIC) of the layers before it, or of those
MAY_INCLUDE names where it lists fewer. tests/,
bench/, examples/, experiments/ and fuzz/ sit on top and may include
anything.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile

# Bottom to top. The daemon's modules are layers of their own, so its
# aggregator and job cannot include each other both ways.
ORDER = [
    "common", "proto_messages", "controller/types", "controller", "kernels",
    "proto_services", "controller/publish", "client", "relay",
    "daemon/topology", "daemon/aggregator", "daemon/job", "daemon/store",
    "daemon/metrics", "daemon/server", "daemon/daemon_config",
    "programs/gnmrd", "programs/gnmr-relay", "programs/gnmrctl", "python",
]
# Layers that are subfolders of another layer's folder.
NESTED = ("controller/types", "controller/publish")
RANK = {name: i for i, name in enumerate(ORDER)}
TOP = {"tests", "bench", "examples", "experiments", "fuzz"}

# Include paths (prefix match) that other layers may use, and their layer.
# Anything else under a layer's folder is private to that layer.
PUBLIC = [
    ("gnmr/version.h", "common"),
    ("common/", "common"),
    ("gnmr/status.h", "common"),
    ("gnmr/v1/controller.pb.h", "proto_messages"),
    ("gnmr/v1/job_state.pb.h", "proto_messages"),
    ("gnmr/v1/gnmr.pb.h", "proto_services"),
    ("gnmr/v1/gnmr.grpc.pb.h", "proto_services"),
    ("gnmr/v1/relay.pb.h", "proto_services"),
    ("gnmr/v1/relay.grpc.pb.h", "proto_services"),
    ("proto/grpc_status.h", "proto_services"),
    ("proto/shared_slice.h", "proto_services"),
    ("proto/channel_backoff.h", "proto_services"),
    ("proto/channel_tls.h", "proto_services"),
    ("controller/types/", "controller/types"),
    ("gnmr/config.h", "controller/types"),
    ("controller/publish/", "controller/publish"),
    ("controller/", "controller"),
    ("gnmr/tensor.h", "kernels"),
    ("kernels/cpu_stats.h", "kernels"),
    ("kernels/cpu_isa.h", "kernels"),
    ("kernels/gpu_stats.h", "kernels"),
    ("kernels/cuda_util.h", "kernels"),
    ("kernels/cuda_driver_fns.h", "kernels"),
    ("gnmr/block_tensor.h", "kernels"),
    ("kernels/block_stats.h", "kernels"),
    ("kernels/gpu_block_stats.h", "kernels"),
    ("gnmr/client.h", "client"),
    ("gnmr/client_options.h", "client"),
    ("gnmr/plan.h", "client"),
    ("gnmr/client_counters.h", "client"),
    ("gnmr/gnmr_c.h", "client"),
    ("gnmr/client_local.h", "client"),
    ("relay/relay_server.h", "relay"),
]
# Edges the order allows but a library's link does not: gnmr_client links
# gnmr_controller_types and never the controller; only its local transport
# (client/local/, library gnmr_client_local) does. (source prefix, exempt
# prefix, include layers, why)
NOT_LINKED = [
    ("client/", "client/local/", ("controller", "controller/publish"),
     "gnmr_client never links the controller (only client/local/ does)"),
]
# Layers that may include fewer layers than all those below them (the
# may-include column of docs/architecture.md's layer table): the statistics
# kernels know nothing of the controller or the wire, and the relay
# forwards the wire without the client, the controller or any job state.
MAY_INCLUDE = {
    "kernels": {"common", "proto_messages", "controller/types"},
    "relay": {"common", "proto_messages", "proto_services"},
    "programs/gnmr-relay": {"common", "proto_messages", "proto_services", "relay"},
}
# Folders whose files are private to their layer (reachable only from it).
PRIVATE = [("kernels/", "kernels"), ("client/", "client"), ("python/", "python"),
           ("relay/", "relay")]

SOURCE = re.compile(r"\.(h|hh|hpp|cc|cpp|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def layer_of_file(rel: str) -> str | None:
    parts = rel.split("/")
    if parts[0] in ("daemon", "programs") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    for nested in NESTED:
        if rel.startswith(nested + "/"):
            return nested
    if parts[0] in RANK:
        return parts[0]
    if parts[0] in TOP:
        return "top"
    return None


def layer_of_include(path: str) -> tuple[str | None, bool]:
    """(layer, public) of an include path; (None, True) if not ours."""
    for prefix, layer in PUBLIC:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            return layer, True
    parts = path.split("/")
    if parts[0] == "daemon" and len(parts) > 2:
        return "daemon/" + parts[1], True
    if parts[0] == "programs" and len(parts) > 2:
        return "programs/" + parts[1], False  # a program's files are its own
    for prefix, layer in PRIVATE:
        if path.startswith(prefix):
            return layer, False
    return None, True


def check(root: str) -> list[str]:
    problems = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = [d for d in dirnames
                       if not d.startswith(".") and not d.startswith("build")
                       and not (rel_dir == "." and d in ("shared",))]
        for name in filenames:
            if not SOURCE.search(name):
                continue
            rel = os.path.normpath(os.path.join(rel_dir, name))
            src_layer = layer_of_file(rel)
            if src_layer is None or src_layer == "top":
                continue
            with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
                text = f.read()
            for m in INCLUDE.finditer(text):
                inc = m.group(1)
                layer, public = layer_of_include(inc)
                if layer is None or layer == src_layer:
                    continue
                line = text.count("\n", 0, m.start()) + 1
                where = f"{rel}:{line}: {src_layer} includes \"{inc}\""
                for src, exempt, incs, why in NOT_LINKED:
                    if rel.startswith(src) and not rel.startswith(exempt) and layer in incs:
                        problems.append(f"{where}: {why}")
                if not public:
                    problems.append(f"{where}: a private file of {layer}")
                elif RANK[layer] > RANK[src_layer]:
                    problems.append(f"{where}: {layer} is above {src_layer}")
                elif src_layer in MAY_INCLUDE and layer not in MAY_INCLUDE[src_layer]:
                    allowed = ", ".join(sorted(MAY_INCLUDE[src_layer], key=RANK.get))
                    problems.append(f"{where}: {src_layer} may include only {allowed}")
    return sorted(problems)


def self_test() -> int:
    """A violation of each kind must be found; a clean tree must pass."""
    with tempfile.TemporaryDirectory() as root:
        def write(rel: str, text: str) -> None:
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            with open(os.path.join(root, rel), "w") as f:
                f.write(text)
        write("controller/types/config.h", '#include "common/status.h"\n#include "gnmr/v1/controller.pb.h"\n')
        write("client/src/a.cc", '#include "controller/types/config.h"\n#include "kernels/cpu_stats.h"\n')
        write("tests/t.cc", '#include "daemon/job/job.h"\n#include "client/src/a.h"\n')
        write("client/local/l.cc", '#include "controller/controller.h"\n#include "client/src/a.h"\n')
        if check(root):
            print("self-test: a clean tree was reported:", check(root))
            return 1
        write("controller/types/bad.cc", '#include "controller/controller.h"\n')
        write("client/src/b.cc", '#include "kernels/cpu/item_kernels.h"\n')
        write("daemon/aggregator/c.cc", '#include "daemon/job/job.h"\n')
        write("controller/d.cc", '#include "gnmr/v1/gnmr.grpc.pb.h"\n')
        write("client/src/e.cc", '#include "controller/publish/decision_message.h"\n')
        write("kernels/cpu/f.cc", '#include "controller/controller.h"\n')
        write("relay/g.cc", '#include "gnmr/client.h"\n')
        write("programs/gnmr-relay/h.cc", '#include "relay/relay_server.h"\n#include "gnmr/client.h"\n')
        write("controller/i.cc", '#include "controller/publish/decision_events.h"\n')
        found = check(root)
        expected = ["controller/types/bad.cc", "client/src/b.cc", "daemon/aggregator/c.cc",
                    "controller/d.cc", "client/src/e.cc", "kernels/cpu/f.cc", "relay/g.cc",
                    "programs/gnmr-relay/h.cc", "controller/i.cc"]
        missing = [e for e in expected if not any(p.startswith(e + ":") for p in found)]
        if missing or len(found) != len(expected):
            print("self-test: expected one violation in each of", expected, "got", found)
            return 1
    print(f"self-test: ok ({len(expected)} planted violations found, clean tree passes)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--self-test", action="store_true",
                    help="plant violations in a temporary tree and check they are found")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    problems = check(os.path.abspath(args.root))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) against the layer order (docs/architecture.md)")
        return 1
    print("includes follow the layer order: " + " < ".join(ORDER))
    return 0


if __name__ == "__main__":
    sys.exit(main())
