#!/usr/bin/python3
"""Static checks of the observability files (stdlib only, no processes).

  check_static.py SOURCE_DIR

- dashboards/*.json parse, are what dashboards/generate.py writes, and are
  well-formed Grafana dashboards: schemaVersion, unique panel ids, grid
  positions, every target with refId and expr, datasource ${datasource},
  template variables datasource / job / unit (job dashboard);
- every metric a dashboard query, a variable or an alert rule names is in
  docs/metrics.md, never selects on `job=` (the label is job_id);
- docs/metrics.md lists exactly the metrics the daemon code registers
  (names in daemon/metrics/*.cc), each with type, labels, unit, meaning and
  series bound, and names follow the conventions (gnmr_ prefix, counters
  _total, histograms _seconds);
- the Grafana provisioning files exist and point at the right things.
"""
import importlib.util
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from prometheus_e2e import metric_names  # noqa: E402

errors = []


def err(msg):
    errors.append(msg)


def doc_metrics(src):
    """name -> (type, labels, unit, meaning, series) from docs/metrics.md tables."""
    out = {}
    for line in open(os.path.join(src, "docs", "metrics.md")):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and re.fullmatch(r"`gnmr_\w+`", cells[0]):
            name = cells[0].strip("`")
            if name in out:
                err(f"docs/metrics.md: {name} listed twice")
            out[name] = cells[1:]
    return out


def code_metrics(src):
    names = {}
    d = os.path.join(src, "daemon", "metrics")
    for f in sorted(os.listdir(d)):
        if not f.endswith(".cc"):
            continue
        text = open(os.path.join(d, f)).read()
        for m in re.finditer(r'(Gauge|Counter|Histogram)\(\s*(?:r,\s*)?"(gnmr_\w+)"', text):
            names[m.group(2)] = m.group(1).lower()
        for m in re.finditer(r'prometheus::MetricFamily \w+\{\s*"(gnmr_\w+)",[^}]*?MetricType::(\w+)', text, re.S):
            names[m.group(1)] = m.group(2).lower()
    return names


def series_names(docs):
    out = set()
    for n, (t, *_rest) in docs.items():
        out.add(n)
        if t == "histogram":
            out |= {n + "_bucket", n + "_sum", n + "_count"}
    return out


def check_docs(src):
    docs = doc_metrics(src)
    code = code_metrics(src)
    if len(code) < 30:
        err(f"found only {len(code)} metric registrations in daemon/metrics/*.cc: parser out of date?")
    for n, t in code.items():
        if n not in docs:
            err(f"docs/metrics.md does not list {n} ({t}), registered in daemon/metrics")
        elif docs[n][0] != t:
            err(f"docs/metrics.md: {n} is a {docs[n][0]}, the code registers a {t}")
    for n in docs:
        if n not in code:
            err(f"docs/metrics.md lists {n}, which daemon/metrics does not register")
    for n, (t, labels, unit, meaning, series) in docs.items():
        if not n.startswith("gnmr_"):
            err(f"{n}: no gnmr_ prefix")
        if t == "counter" and not n.endswith("_total"):
            err(f"{n}: a counter not ending in _total")
        if t != "counter" and n.endswith("_total"):
            err(f"{n}: a {t} ending in _total")
        if t == "histogram" and not n.endswith("_seconds"):
            err(f"{n}: a histogram not in _seconds")
        if "job" in re.findall(r"`(\w+)`", labels):
            err(f"{n}: label `job` (use job_id)")
        for what, v in (("unit", unit), ("meaning", meaning), ("series", series)):
            if not v:
                err(f"docs/metrics.md: {n} has no {what}")
    return docs


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def check_dashboards(src, known):
    ddir = os.path.join(src, "dashboards")
    spec = importlib.util.spec_from_file_location("gen", os.path.join(ddir, "generate.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    generated = {"gnmr-job.json": gen.render(gen.job_dashboard()),
                 "gnmr-daemon.json": gen.render(gen.daemon_dashboard())}
    files = sorted(f for f in os.listdir(ddir) if f.endswith(".json"))
    if files != sorted(generated):
        err(f"dashboards/: expected {sorted(generated)}, found {files}")
    for f in files:
        path = os.path.join(ddir, f)
        text = open(path).read()
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            err(f"{f}: invalid JSON: {e}")
            continue
        if f in generated and text != generated[f]:
            err(f"{f}: differs from what dashboards/generate.py writes (rerun it)")
        for k in ("uid", "title", "panels", "templating", "schemaVersion", "time"):
            if k not in d:
                err(f"{f}: no {k}")
        if not 36 <= d.get("schemaVersion", 0) <= 39:
            err(f"{f}: schemaVersion {d.get('schemaVersion')}")
        variables = {v["name"]: v for v in d["templating"]["list"]}
        if variables.get("datasource", {}).get("type") != "datasource" or \
                variables["datasource"].get("query") != "prometheus":
            err(f"{f}: no datasource variable of type prometheus")
        if f == "gnmr-job.json":
            want = {"job": "label_values(gnmr_units, job_id)",
                    "unit": 'label_values(gnmr_unit_gnmr{job_id="$job"}, unit)'}
            for name, q in want.items():
                if variables.get(name, {}).get("definition") != q:
                    err(f"{f}: variable {name} should be {q!r}")
        for v in variables.values():
            if v["type"] == "query":
                if v.get("datasource", {}).get("uid") != "${datasource}":
                    err(f"{f}: variable {v['name']}: datasource not ${{datasource}}")
                for n in metric_names(re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", v["definition"])):
                    if n not in known:
                        err(f"{f}: variable {v['name']} names {n}, not in docs/metrics.md")
        ids = set()
        cells = set()
        n_targets = 0
        for p in walk_panels(d["panels"]):
            pid = p.get("id")
            if pid in ids:
                err(f"{f}: panel id {pid} twice")
            ids.add(pid)
            g = p.get("gridPos", {})
            if not all(isinstance(g.get(k), int) for k in "xywh") or g["x"] + g["w"] > 24:
                err(f"{f}: panel {p.get('title')}: bad gridPos {g}")
            else:
                for x in range(g["x"], g["x"] + g["w"]):
                    for y in range(g["y"], g["y"] + g["h"]):
                        if (x, y) in cells:
                            err(f"{f}: panel {p.get('title')} overlaps another at {x},{y}")
                            break
                        cells.add((x, y))
            if p.get("type") == "row":
                continue
            if not p.get("title") or not p.get("targets"):
                err(f"{f}: panel {pid} has no title or no targets")
            if p.get("datasource", {}).get("uid") != "${datasource}":
                err(f"{f}: panel {p.get('title')}: datasource not ${{datasource}}")
            refs = set()
            for t in p.get("targets", []):
                n_targets += 1
                if t.get("refId") in refs or not t.get("refId"):
                    err(f"{f}: panel {p['title']}: bad or duplicate refId")
                refs.add(t.get("refId"))
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    err(f"{f}: panel {p['title']}: target datasource not ${{datasource}}")
                expr = t.get("expr", "")
                if not expr:
                    err(f"{f}: panel {p['title']}: target without expr")
                if re.search(r"[{,]\s*job\s*[=!]", expr):
                    err(f"{f}: panel {p['title']}: selects on job (use job_id): {expr}")
                for n in metric_names(expr):
                    if n not in known:
                        err(f"{f}: panel {p['title']}: {n} is not a gnmrd metric (docs/metrics.md)")
        if n_targets == 0:
            err(f"{f}: no queries")


def check_rules(src, known):
    path = os.path.join(src, "deploy", "prometheus", "gnmr.rules.yml")
    exprs = []
    lines = open(path).read().splitlines()
    i = 0
    while i < len(lines):
        m = re.match(r"^(\s*)expr:\s*(.*)$", lines[i])
        if m:
            indent, first = len(m.group(1)), m.group(2)
            body = [] if first in (">-", ">", "|", "|-") else [first]
            i += 1
            while i < len(lines) and (not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > indent):
                body.append(lines[i].strip())
                i += 1
            exprs.append(" ".join(body))
            continue
        i += 1
    alerts = re.findall(r"^\s*- alert:\s*(\w+)", "\n".join(lines), re.M)
    if len(exprs) != len(alerts) or len(alerts) < 6:
        err(f"gnmr.rules.yml: {len(alerts)} alerts, {len(exprs)} exprs")
    for e in exprs:
        if re.search(r"[{,]\s*job\s*[=!]", e):
            err(f"gnmr.rules.yml: selects on job (use job_id): {e}")
        for n in metric_names(e):
            if n not in known:
                err(f"gnmr.rules.yml: {n} is not a gnmrd metric (docs/metrics.md): {e}")
    tests = open(os.path.join(src, "deploy", "prometheus", "gnmr.rules.test.yml")).read()
    for a in alerts:
        n = len(re.findall(rf"alertname:\s*{a}\s*$", tests, re.M))
        if n < 2:
            err(f"gnmr.rules.test.yml: alert {a} has {n} test case(s); want firing and silent ones")


def check_provisioning(src):
    p = os.path.join(src, "dashboards", "provisioning")
    ds = open(os.path.join(p, "datasources", "gnmr-prometheus.yaml")).read()
    for want in ("apiVersion: 1", "type: prometheus", "datasources:"):
        if want not in ds:
            err(f"provisioning/datasources: no {want!r}")
    db = open(os.path.join(p, "dashboards", "gnmr.yaml")).read()
    for want in ("apiVersion: 1", "providers:", "type: file", "path:"):
        if want not in db:
            err(f"provisioning/dashboards: no {want!r}")


def main():
    src = sys.argv[1]
    docs = check_docs(src)
    known = series_names(docs)
    check_dashboards(src, known)
    check_rules(src, known)
    check_provisioning(src)
    if errors:
        print("FAIL:\n  " + "\n  ".join(errors))
        return 1
    print(f"PASS: {len(docs)} metrics documented; dashboards, rules and provisioning consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
