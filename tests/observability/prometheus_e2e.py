#!/usr/bin/python3
"""Observability tests with real processes on loopback (stdlib only).

  prometheus_e2e.py e2e --gnmrd G --synth S --gnmrctl C --source-dir D
      gnmrd + a 4-rank gnmr-synth job (spikes beyond max_o, a NaN) + a real
      Prometheus (1 s scrapes, storage in a temporary folder) loading
      deploy/prometheus/gnmr.rules.yml. Once data flows, every target of
      every panel of dashboards/*.json (template variables substituted) is
      evaluated through the Prometheus HTTP API and must return data, and
      must name only metrics gnmrd exports. Also: the variable queries
      return the job and a unit, every alert rule evaluates healthy, and
      GnmrNonFiniteGradients fires for the NaN.

  prometheus_e2e.py check-metrics --gnmrd G --synth S
      `promtool check metrics` on a live /metrics scrape taken while a job
      with spikes and a NaN runs: no findings.

Exit 77 (ctest: skipped) when prometheus/promtool is not installed.
Everything listens on 127.0.0.1 on free ports; every process started here
is killed at the end.
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

SKIP = 77
JOB = "obs-e2e"
T0 = time.monotonic()

# PromQL words that are not metric names.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile", "by", "without", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "offset", "bool", "atan2", "rate", "irate",
    "increase", "delta", "idelta", "deriv", "histogram_quantile", "time", "abs",
    "clamp_min", "clamp_max", "label_replace", "label_join", "vector", "scalar",
    "sort", "sort_desc", "changes", "resets", "absent", "absent_over_time",
    "avg_over_time", "max_over_time", "min_over_time", "sum_over_time",
    "count_over_time", "last_over_time", "round", "ceil", "floor", "inf", "nan",
}


def log(msg):
    print(f"[{time.monotonic() - T0:6.1f}s] {msg}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout=5.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.read().decode()


class Procs:
    """Processes started here; all killed by close()."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, name, argv, stdout=None):
        out = stdout if stdout is not None else open(os.path.join(self.work, name + ".out"), "w")
        err = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        p.gnmr_name = name
        self.procs.append(p)
        return p

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def dump_logs(self):
        for p in self.procs:
            path = os.path.join(self.work, p.gnmr_name + ".log")
            try:
                text = open(path).read()[-2000:]
            except OSError:
                continue
            if text.strip():
                print(f"--- {p.gnmr_name} (exit {p.poll()}) stderr tail:\n{text}")


def wait_for(what, fn, timeout, interval=0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = fn()
            if v:
                return v
        except (OSError, urllib.error.URLError, ValueError) as e:
            last = e
        time.sleep(interval)
    raise SystemExit(f"FAIL: timed out after {timeout}s waiting for {what} (last error: {last})")


def start_gnmrd(procs, work, args):
    """gnmrd with max_o 1, so spikes on three units at once cause denials."""
    metrics_port = free_port()
    sock = os.path.join(work, "gnmrd.sock")
    cfg = os.path.join(work, "gnmrd.yaml")
    with open(cfg, "w") as f:
        f.write("snapshot_every_steps: 20\n"
                "step_deadline_ms: 2000\n"
                "metrics:\n  top_k_units: 6\n"
                "controller:\n  warmup: 20\n  max_o: 1\n  lock_steps: 15\n  lag: 1\n")
    gnmrd = procs.start("gnmrd", [args.gnmrd, "--config", cfg, "--listen", "unix:" + sock,
                                  "--state-dir", os.path.join(work, "state"),
                                  "--metrics", f"127.0.0.1:{metrics_port}", "--log-level", "warn"])
    url = f"http://127.0.0.1:{metrics_port}/metrics"

    def up():
        if gnmrd.poll() is not None:
            raise SystemExit(f"FAIL: gnmrd exited with {gnmrd.returncode}")
        return "gnmr_build_info" in http_get(url)
    wait_for("gnmrd /metrics", up, 15)
    return gnmrd, sock, url


def start_ranks(procs, args, sock, steps, step_ms):
    ranks = []
    spikes = []
    # Every 60 steps after warm-up: three units spike at once (1 admitted,
    # 2 denied with max_o 1); a NaN in unit 1 at step 90.
    for s in range(40, steps - 10, 60):
        for u in (3, 5, 7):
            spikes += ["--spike", f"{s}:{u}:30"]
    for rank in range(4):
        ranks.append(procs.start(
            f"rank{rank}",
            [args.synth, "--target", "unix:" + sock, "--job", JOB, "--rank", str(rank),
             "--world-size", "4", "--steps", str(steps), "--units", "16", *spikes,
             "--nan", "90:1", "--step-ms", str(step_ms), "--decision-wait-ms", "200"]))
    return ranks


def metric_names(expr):
    """Metric names an expression refers to (label matchers, strings,
    durations, grouping clauses and function names removed)."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    names = set()
    for m in re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)", e):
        w = m.group(1)
        if w.lower() in PROMQL_WORDS:
            continue
        names.add(w)
    return names


def exported_names(text):
    """Series names in an exposition text (histograms: _bucket/_sum/_count)."""
    names = set()
    for line in text.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            n, t = m.groups()
            if t in ("histogram", "summary"):
                names |= {n + "_bucket", n + "_sum", n + "_count", n}
            else:
                names.add(n)
    return names


def substitute(expr, values):
    out = expr
    for k in sorted(values, key=len, reverse=True):
        out = out.replace("${" + k + "}", values[k]).replace("$" + k, values[k])
    if "$" in out:
        raise SystemExit(f"FAIL: unsubstituted variable in {out!r}")
    return out


def dashboard_targets(path):
    d = json.load(open(path))
    out = []

    def walk(panels):
        for p in panels:
            if p.get("type") == "row":
                walk(p.get("panels", []))
                continue
            for t in p.get("targets", []):
                out.append((p["title"], t["refId"], t["expr"], bool(t.get("instant"))))
    walk(d["panels"])
    variables = [v for v in d["templating"]["list"] if v["type"] == "query"]
    return d["title"], out, variables


def run_e2e(args):
    for tool in ("prometheus", "promtool"):
        if shutil.which(tool) is None:
            print(f"SKIP: {tool} is not installed (scripts/install_deps.sh installs it)")
            return SKIP
    work = tempfile.mkdtemp(prefix="gnmr-obs-")
    procs = Procs(work)
    ok = False
    try:
        gnmrd, sock, metrics_url = start_gnmrd(procs, work, args)
        # Errors for the RPC error panel: ask about a job that does not exist.
        for cmd in (["units", "--job", "no-such-job"], ["events", "--job", "no-such-job"]):
            subprocess.run([args.gnmrctl, *cmd, "--target", "unix:" + sock],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)

        prom_port = free_port()
        prom_cfg = os.path.join(work, "prometheus.yml")
        rules = os.path.abspath(os.path.join(args.source_dir, "deploy", "prometheus", "gnmr.rules.yml"))
        metrics_port = urllib.parse.urlparse(metrics_url).port
        with open(prom_cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {rules}\n"
                    "scrape_configs:\n  - job_name: gnmrd\n    scrape_interval: 1s\n"
                    "    scrape_timeout: 900ms\n"
                    f"    static_configs:\n      - targets: ['127.0.0.1:{metrics_port}']\n")
        procs.start("prometheus", ["prometheus", "--config.file", prom_cfg,
                                   "--storage.tsdb.path", os.path.join(work, "prom"),
                                   "--web.listen-address", f"127.0.0.1:{prom_port}",
                                   "--log.level", "warn"])
        api = f"http://127.0.0.1:{prom_port}/api/v1"

        def query(expr, instant=True, start=None):
            if instant:
                url = f"{api}/query?" + urllib.parse.urlencode({"query": expr})
            else:
                now = time.time()
                url = f"{api}/query_range?" + urllib.parse.urlencode(
                    {"query": expr, "start": f"{start:.3f}", "end": f"{now:.3f}", "step": "1"})
            r = json.loads(http_get(url))
            if r.get("status") != "success":
                raise SystemExit(f"FAIL: query {expr!r}: {r}")
            return r["data"]["result"]

        def scalar(expr):
            res = query(expr)
            return float(res[0]["value"][1]) if res else 0.0

        wait_for("Prometheus ready", lambda: http_get(f"http://127.0.0.1:{prom_port}/-/ready"), 30)
        log("prometheus ready")
        # Ranks start once Prometheus scrapes, so it sees the job's counters
        # at 0 before the first admission (increase() then counts it).
        wait_for("the first scrape", lambda: query("gnmr_jobs"), 15)
        ranks = start_ranks(procs, args, sock, steps=900, step_ms=40)
        data_start = time.time()
        # Enough data: 12 s of scrapes, steps decided, a denial and a NaN seen.
        def enough():
            for r in ranks:
                if r.poll() not in (None, 0):
                    raise SystemExit(f"FAIL: {r.gnmr_name} exited with {r.returncode}")
            j = f'job_id="{JOB}"'
            state = {
                "scrapes": scalar(f"count_over_time(gnmr_decisions_total{{{j}}}[1m])") >= 10,
                "denials": scalar(f"max(gnmr_denials_total{{{j}}})") > 0,
                "nonfinite": scalar(f'sum(gnmr_admissions_total{{{j},trigger="nonfinite"}})') > 0,
                "recovery": scalar(f"max(max_over_time(gnmr_units_in_recovery{{{j}}}[1m]))") > 0,
                "rpc errors": scalar(f'sum(gnmr_rpcs_total{{code!="OK"}})') > 0,
            }
            missing = [k for k, v in state.items() if not v]
            if missing != last_missing[0]:
                log(f"waiting for: {missing}")
                last_missing[0] = missing
            return not missing
        last_missing = [None]
        wait_for("data (decisions, denials, a non-finite admission, RPC errors)", enough, 60, 0.5)
        log("data flows")

        exported = exported_names(http_get(metrics_url))
        units = query(f'max_over_time(gnmr_unit_in_recovery{{job_id="{JOB}"}}[5m]) == 1')
        if not units:
            raise SystemExit("FAIL: no unit in recovery")
        unit = units[0]["metric"]["unit"]
        instance = units[0]["metric"]["instance"]
        values = {"job": JOB, "unit": unit, "instance": instance, "datasource": "prometheus",
                  "__rate_interval": "10s", "__interval": "1s", "__range": "1m",
                  "__range_s": "60"}
        failures = []
        checked = 0
        for path in sorted(os.listdir(os.path.join(args.source_dir, "dashboards"))):
            if not path.endswith(".json"):
                continue
            title, targets, variables = dashboard_targets(
                os.path.join(args.source_dir, "dashboards", path))
            # Variable queries: label_values(selector, label).
            for v in variables:
                m = re.fullmatch(r"label_values\((.*),\s*(\w+)\)", v["definition"])
                if not m:
                    failures.append(f"{title}: variable {v['name']}: unsupported query {v['definition']!r}")
                    continue
                sel = substitute(m.group(1), values)
                for n in metric_names(sel):
                    if n not in exported:
                        failures.append(f"{title}: variable {v['name']}: {n} is not exported by gnmrd")
                url = f"{api}/label/{m.group(2)}/values?" + urllib.parse.urlencode({"match[]": sel})
                got = json.loads(http_get(url))["data"]
                want = values[v["name"]]
                if want not in got:
                    failures.append(f"{title}: variable {v['name']}: {want!r} not in {got}")
                checked += 1
            for ptitle, ref, expr, instant in targets:
                q = substitute(expr, values)
                unknown = sorted(n for n in metric_names(q) if n not in exported)
                if unknown:
                    failures.append(f"{title} / {ptitle} [{ref}]: names metrics gnmrd does not export: {unknown}")
                    continue
                deadline = time.monotonic() + 8
                while True:
                    res = query(q, instant, data_start)
                    if res or time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
                if not res:
                    failures.append(f"{title} / {ptitle} [{ref}]: no data: {q}")
                checked += 1
        log(f"evaluated {checked} queries and variables")

        # Alert rules: all evaluated without error; the NaN fires an alert.
        def rules_evaluated():
            groups = json.loads(http_get(f"{api}/rules"))["data"]["groups"]
            rs = [r for g in groups for r in g["rules"]]
            evaluated = all(not r.get("lastEvaluation", "0001").startswith("0001") for r in rs)
            return rs if rs and evaluated else None
        rs = wait_for("rules evaluated", rules_evaluated, 10)
        for r in rs:
            if r.get("health") != "ok":
                failures.append(f"rule {r['name']}: health {r.get('health')}: {r.get('lastError')}")
        def nonfinite_alert():
            alerts = json.loads(http_get(f"{api}/alerts"))["data"]["alerts"]
            return any(a["labels"].get("alertname") == "GnmrNonFiniteGradients"
                       and a["labels"].get("job_id") == JOB and a["state"] == "firing"
                       for a in alerts)
        wait_for("GnmrNonFiniteGradients firing", nonfinite_alert, 10)
        log(f"{len(rs)} alert rules healthy; GnmrNonFiniteGradients fired")

        if failures:
            print("FAIL:\n  " + "\n  ".join(failures))
            return 1
        ok = True
        print(f"PASS: {checked} dashboard queries/variables returned data; took "
              f"{time.monotonic() - T0:.1f}s")
        return 0
    finally:
        procs.close()
        if not ok:
            procs.dump_logs()
        shutil.rmtree(work, ignore_errors=True)


def run_check_metrics(args):
    if shutil.which("promtool") is None:
        print("SKIP: promtool is not installed (scripts/install_deps.sh installs it)")
        return SKIP
    work = tempfile.mkdtemp(prefix="gnmr-obs-")
    procs = Procs(work)
    try:
        gnmrd, sock, url = start_gnmrd(procs, work, args)
        ranks = start_ranks(procs, args, sock, steps=130, step_ms=5)
        for r in ranks:
            r.wait(timeout=60)
            if r.returncode != 0:
                procs.dump_logs()
                raise SystemExit(f"FAIL: {r.gnmr_name} exited with {r.returncode}")
        text = http_get(url)
        for want in ("gnmr_unit_gnmr{", "gnmr_client_overhead_ratio{", "gnmr_snapshot_age_seconds{",
                     "gnmr_decision_latency_seconds_bucket{", "gnmr_process_resident_memory_bytes"):
            if want not in text:
                raise SystemExit(f"FAIL: the scrape has no {want}")
        p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        findings = (p.stdout + p.stderr).strip()
        if p.returncode != 0 or findings:
            print(f"FAIL: promtool check metrics (exit {p.returncode}):\n{findings}")
            return 1
        print(f"PASS: promtool check metrics is clean on {len(text.splitlines())} lines")
        return 0
    finally:
        procs.close()
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["e2e", "check-metrics"])
    ap.add_argument("--gnmrd", required=True)
    ap.add_argument("--synth", required=True)
    ap.add_argument("--gnmrctl")
    ap.add_argument("--source-dir")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks
    return run_e2e(args) if args.mode == "e2e" else run_check_metrics(args)


if __name__ == "__main__":
    sys.exit(main())
