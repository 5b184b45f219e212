#!/usr/bin/env python3
"""Writes the Grafana dashboards of GNMR (gnmr-job.json, gnmr-daemon.json).

The JSON files are committed; edit this script and rerun it
(python3 dashboards/generate.py) rather than editing them by hand.
tests/observability checks that the files match this script's output, that
every query names only metrics gnmrd exports (docs/metrics.md), and that
every query returns data against a real Prometheus scraping a real gnmrd.
"""
import json
import os

DS = {"type": "prometheus", "uid": "${datasource}"}
J = 'job_id="$job"'
U = 'job_id="$job", unit=~"$unit"'
RI = "$__rate_interval"


class Layout:
    """Places panels left to right, 24 columns wide."""

    def __init__(self):
        self.x, self.y, self.row_h, self.next_id = 0, 0, 0, 1

    def place(self, w, h):
        if self.x + w > 24:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        pos = {"x": self.x, "y": self.y, "w": w, "h": h}
        self.x += w
        self.row_h = max(self.row_h, h)
        return pos

    def row(self, title):
        if self.x:
            self.x, self.y, self.row_h = 0, self.y + self.row_h, 0
        p = {"type": "row", "title": title, "id": self.take_id(), "collapsed": False,
             "gridPos": {"x": 0, "y": self.y, "w": 24, "h": 1}, "panels": []}
        self.y += 1
        return p

    def take_id(self):
        i = self.next_id
        self.next_id += 1
        return i


def target(expr, legend="", ref="A", instant=False, fmt="time_series"):
    t = {"datasource": DS, "refId": ref, "expr": expr, "legendFormat": legend,
         "range": not instant, "instant": instant, "format": fmt, "editorMode": "code"}
    return t


def rates(selector, pairs):
    """Targets: per-second rate of each counter in `pairs` (name, legend)."""
    return [(f"sum(rate({name}{{{selector}}}[{RI}]))", legend) for name, legend in pairs]


def panel(lay, kind, title, desc, targets, w=8, h=8, unit=None, extra=None, options=None):
    refs = "ABCDEFGH"
    ts = []
    for i, t in enumerate(targets):
        if isinstance(t, tuple):
            t = target(*t)
        t = dict(t)
        t["refId"] = refs[i]
        ts.append(t)
    defaults = {}
    if unit:
        defaults["unit"] = unit
    p = {"type": kind, "title": title, "description": desc, "id": lay.take_id(),
         "datasource": DS, "gridPos": lay.place(w, h), "targets": ts,
         "fieldConfig": {"defaults": defaults, "overrides": []},
         "options": options or {}}
    if extra:
        p.update(extra)
    return p


def heatmap(lay, title, desc, expr, legend):
    """A GNMR heat map: one row per series of `expr`, over time."""
    return panel(lay, "heatmap", title, desc, [(expr, legend)], w=12, h=10,
                 options={"calculate": False, "yAxis": {"axisPlacement": "left"},
                          "color": {"mode": "scheme", "scheme": "Oranges", "scale": "exponential",
                                    "exponent": 0.5, "fill": "dark-orange", "steps": 64},
                          "cellGap": 1, "legend": {"show": True}, "tooltip": {"show": True, "yHistogram": False},
                          "rowsFrame": {"layout": "auto"}})


def top_table(lay, title, desc, sel, by, n, columns):
    """A table of the `n` values of `by` with the highest first column now;
    columns: [(metric, column title)], the first one ranks."""
    rank = f"topk({n}, max by ({by}) ({columns[0][0]}{{{sel}}}))"
    refs = "ABCDEFGH"
    targets = [(rank, "", "A", True, "table")]
    for ref, (metric, _) in zip(refs[1:], columns[1:]):
        targets.append((f"max by ({by}) ({metric}{{{sel}}}) and on ({by}) {rank}", "", ref, True, "table"))
    names = {f"Value #{ref}": name for ref, (_, name) in zip(refs, columns)}
    return panel(lay, "table", title, desc, targets, w=12, h=10,
                 extra={"transformations": [
                     {"id": "merge", "options": {}},
                     {"id": "organize", "options": {"excludeByName": {"Time": True}, "renameByName": names}},
                     {"id": "sortBy", "options": {"sort": [{"field": columns[0][1], "desc": True}]}}]})


def ds_var():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1,
            "regex": "", "options": []}


def query_var(name, label, query, include_all=False, multi=False):
    v = {"name": name, "label": label, "type": "query", "datasource": DS,
         "definition": query, "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
         "refresh": 2, "sort": 1, "hide": 0, "current": {}, "options": [],
         "includeAll": include_all, "multi": multi, "regex": ""}
    if include_all:
        v["allValue"] = ".*"
    return v


def dashboard(uid, title, desc, panels, variables, tags):
    return {
        "uid": uid, "title": title, "description": desc, "tags": tags,
        "schemaVersion": 38, "version": 1, "editable": True, "graphTooltip": 1,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "timezone": "", "timepicker": {}, "links": [], "liveNow": False,
        "fiscalYearStartMonth": 0, "weekStart": "",
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"},
            "enable": True, "hide": True, "iconColor": "rgba(0, 211, 255, 1)",
            "name": "Annotations & Alerts", "type": "dashboard"}]},
        "templating": {"list": variables}, "panels": panels,
    }


def job_dashboard():
    L = Layout()
    P = []
    P.append(L.row("Recovery budget"))
    P.append(panel(L, "timeseries", "Budget use: units in recovery vs max_o",
                   "Units of the job in recovery now against the budget max_o.",
                   [(f"max(gnmr_units_in_recovery{{{J}}})", "in recovery"),
                    (f"max(gnmr_max_o{{{J}}})", "max_o")], w=10))
    P.append(panel(L, "gauge", "Budget used", "Units in recovery / max_o, now.",
                   [(f"max(gnmr_units_in_recovery{{{J}}}) / max(gnmr_max_o{{{J}}})", "", "A", True)],
                   w=4, unit="percentunit",
                   extra={"fieldConfig": {"defaults": {"unit": "percentunit", "min": 0, "max": 1,
                          "thresholds": {"mode": "absolute", "steps": [
                              {"color": "green", "value": None}, {"color": "orange", "value": 0.75},
                              {"color": "red", "value": 1}]}}, "overrides": []}}))
    P.append(panel(L, "timeseries", "Admissions by trigger, denials",
                   "Units admitted to recovery per second by trigger (gnmr, delta, nonfinite; "
                   "forward, saturation, underflow from the forward channel), "
                   "and triggered units denied because max_o was reached (denied, clipped: "
                   "of those, clipped on their step with denied: clip).",
                   [(f"sum by (trigger) (rate(gnmr_admissions_total{{{J}}}[{RI}]))", "admitted: {{trigger}}"),
                    (f"sum(rate(gnmr_denials_total{{{J}}}[{RI}]))", "denied"),
                    (f"sum(rate(gnmr_denied_clips_total{{{J}}}[{RI}]))", "denied, clipped"),
                    (f"sum(rate(gnmr_releases_total{{{J}}}[{RI}]))", "released")], w=10, unit="ops"))
    P.append(panel(L, "state-timeline", "Recovery timeline per unit",
                   "1 while a unit is in recovery (exported units: those in recovery and the top K by GNMR).",
                   [(f"max by (unit) (gnmr_unit_in_recovery{{{U}}})", "{{unit}}")], w=12, h=9,
                   extra={"fieldConfig": {"defaults": {"mappings": [{"type": "value", "options": {
                       "0": {"text": "normal", "color": "green"}, "1": {"text": "recovery", "color": "red"}}}]},
                       "overrides": []}}))
    P.append(panel(L, "timeseries", "Admissions by action",
                   "Units admitted per second by the action they get (promote, clip, skip, reset_state).",
                   [(f"sum by (action) (rate(gnmr_admissions_total{{{J}}}[{RI}]))", "{{action}}")],
                   w=6, h=9, unit="ops"))
    P.append(panel(L, "stat", "Non-finite events",
                   "Units admitted to recovery for NaN/Inf gradients: in the time range, and since the job started.",
                   [(f"sum(increase(gnmr_admissions_total{{{J}, trigger=\"nonfinite\"}}[$__range]))",
                     "in range", "A", True),
                    (f"sum(gnmr_admissions_total{{{J}, trigger=\"nonfinite\"}})", "since start", "B", True)],
                   w=6, h=9, extra={"fieldConfig": {"defaults": {"decimals": 0, "thresholds": {
                       "mode": "absolute", "steps": [{"color": "green", "value": None},
                                                     {"color": "red", "value": 1}]}}, "overrides": []}}))

    P.append(L.row("Units"))
    P.append(heatmap(L, "GNMR heat map over units",
                     "Last GNMR of each exported unit over time (a row per unit).",
                     f"max by (unit) (gnmr_unit_gnmr{{{U}}})", "{{unit}}"))
    P.append(top_table(L, "Top units by GNMR",
                       "The 10 units with the highest GNMR now, with their gradient norm and historical mean.",
                       J, "unit", 10, [("gnmr_unit_gnmr", "GNMR"), ("gnmr_unit_norm", "norm"),
                                       ("gnmr_unit_mu", "mean norm (mu)"),
                                       ("gnmr_unit_in_recovery", "in recovery")]))
    P.append(panel(L, "timeseries", "GNMR of $unit", "Last GNMR of the selected units.",
                   [(f"max by (unit) (gnmr_unit_gnmr{{{U}}})", "{{unit}}")], w=8))
    P.append(panel(L, "timeseries", "Gradient norm vs mean of $unit",
                   "Last gradient norm and its historical mean (mu) for the selected units.",
                   [(f"max by (unit) (gnmr_unit_norm{{{U}}})", "norm {{unit}}"),
                    (f"max by (unit) (gnmr_unit_mu{{{U}}})", "mu {{unit}}")], w=8))
    P.append(panel(L, "timeseries", "Recovery fraction",
                   "Unit-steps spent in recovery / all unit-steps: in each interval, and over the job's life.",
                   [(f"sum(rate(gnmr_unit_steps_in_recovery_total{{{J}}}[{RI}])) / sum(rate(gnmr_unit_steps_total{{{J}}}[{RI}]))",
                     "interval"),
                    (f"max(gnmr_recovery_fraction{{{J}}})", "lifetime")], w=8, unit="percentunit"))
    P.append(panel(L, "timeseries", "Forward channel of $unit: saturation and forward norm",
                   "Units that report forward tensors (their quantized input): the saturated "
                   "fraction over its historical mean (the saturation rule fires at "
                   "tau_saturation, default 16) and the forward norm over its mean (the forward "
                   "rule, tau_forward, default 6); units that report their quantized gradient: "
                   "its norm over its mean (the backward rule, tau_backward, default 6). 0 for "
                   "units without such statistics.",
                   [(f"max by (unit) (gnmr_unit_saturation{{{U}}})", "saturation {{unit}}"),
                    (f"max by (unit) (gnmr_unit_forward{{{U}}})", "forward {{unit}}"),
                    (f"max by (unit) (gnmr_unit_backward{{{U}}})", "backward {{unit}}")],
                   w=24))
    P.append(panel(L, "timeseries", "Block health of $unit",
                   "Units whose forward tensors are block-scaled (MXFP8, MXFP4, NVFP4, FP8 with "
                   "1x128 / 128x128 scales): of the last step's blocks, the fraction with a code "
                   "at the element format's maximum (saturated), with every code zero (dead), "
                   "and with a scale at an end of its range (clamped). 0 for other units.",
                   [(f"max by (unit) (gnmr_unit_saturated_blocks{{{U}}})", "saturated {{unit}}"),
                    (f"max by (unit) (gnmr_unit_dead_blocks{{{U}}})", "dead {{unit}}"),
                    (f"max by (unit) (gnmr_unit_scale_clamps{{{U}}})", "clamped {{unit}}")],
                   w=24, unit="percentunit"))
    # Every unit, folded by name into groups (docs/metrics.md, "Unit groups"):
    # the shape of the whole model at any size, where the panels above show
    # only the exported (hot) units.
    P.append(heatmap(L, "GNMR heat map by unit group (every unit)",
                     "Highest last GNMR of each unit group (by default a layer: the first two parts of a unit's name), over time.",
                     f"max by (group) (gnmr_group_gnmr_max{{{J}}})", "{{group}}"))
    P.append(top_table(L, "Hottest unit groups",
                       "The 20 unit groups with the highest GNMR now, with their units and units in recovery.",
                       J, "group", 20, [("gnmr_group_gnmr_max", "max GNMR"), ("gnmr_group_units", "units"),
                                        ("gnmr_group_units_in_recovery", "in recovery")]))

    P.append(L.row("Steps and ranks"))
    P.append(panel(L, "timeseries", "Step rate", "Steps decided per second, and global skips.",
                   rates(J, [("gnmr_decisions_total", "steps/s"), ("gnmr_global_skips_total", "global skips/s")]), w=8, unit="ops"))
    P.append(panel(L, "stat", "Last step", "Last step the daemon decided for the job.",
                   [(f"max(gnmr_last_step{{{J}}})", "", "A", True)], w=4, extra={
                       "fieldConfig": {"defaults": {"decimals": 0}, "overrides": []}}))
    P.append(panel(L, "timeseries", "Ranks connected", "Ranks with a live session against the world size.",
                   [(f"sum(gnmr_ranks_connected{{{J}}})", "connected"),
                    (f"max(gnmr_ranks_expected{{{J}}})", "world size")], w=6))
    P.append(panel(L, "timeseries", "Late and incomplete reports",
                   "Reports for steps already closed, steps closed by the deadline, and unit-steps left unevaluated.",
                   rates(J, [("gnmr_late_reports_total", "late reports/s"), ("gnmr_incomplete_steps_total", "incomplete steps/s"), ("gnmr_incomplete_unit_steps_total", "incomplete unit-steps/s")]),
                   w=6, unit="ops"))
    P.append(panel(L, "timeseries", "Decision latency p50 / p99",
                   "Last report in to decision out, and two parts of it: combining the ranks' reports, and queueing the decision to every stream.",
                   [(f"histogram_quantile(0.5, sum by (le) (rate(gnmr_decision_latency_seconds_bucket{{{J}}}[{RI}])))", "decision p50"),
                    (f"histogram_quantile(0.99, sum by (le) (rate(gnmr_decision_latency_seconds_bucket{{{J}}}[{RI}])))", "decision p99"),
                    (f"histogram_quantile(0.99, sum by (le) (rate(gnmr_aggregation_seconds_bucket{{{J}}}[{RI}])))", "aggregation p99"),
                    (f"histogram_quantile(0.99, sum by (le) (rate(gnmr_decision_broadcast_seconds_bucket{{{J}}}[{RI}])))", "broadcast p99")],
                   w=8, unit="s"))
    P.append(panel(L, "timeseries", "Client overhead ratio",
                   "Per rank: time spent computing GNMR statistics / step time.",
                   [(f"max by (rank) (gnmr_client_overhead_ratio{{{J}}})", "rank {{rank}}")], w=8, unit="percentunit"))
    P.append(panel(L, "timeseries", "Client statistics time",
                   "Per rank: seconds of GNMR statistics per second, on the GPU (CUDA events; 0 on the CPU path) "
                   "and on the host (time in Observe; GPU path: enqueueing only).",
                   [(f"sum by (rank) (rate(gnmr_client_stats_gpu_seconds_total{{{J}}}[{RI}]))", "GPU rank {{rank}}"),
                    (f"sum by (rank) (rate(gnmr_client_stats_seconds_total{{{J}}}[{RI}]))", "host rank {{rank}}")],
                   w=8, unit="s"))
    P.append(panel(L, "timeseries", "Client drops and ack mismatches",
                   "Reports the client dropped, decisions it missed, and acks whose digest did not match.",
                   rates(J, [("gnmr_client_dropped_reports_total", "dropped reports/s"), ("gnmr_client_missed_decisions_total", "missed decisions/s"), ("gnmr_ack_mismatches_total", "ack mismatches/s")]), w=8, unit="ops"))
    P.append(panel(L, "timeseries", "Report traffic", "StepStats reports and bytes received from the job's ranks.",
                   rates(J, [("gnmr_reports_total", "reports/s"), ("gnmr_report_bytes_total", "bytes/s")]), w=8,
                   extra={"fieldConfig": {"defaults": {}, "overrides": [
                       {"matcher": {"id": "byName", "options": "bytes/s"},
                        "properties": [{"id": "unit", "value": "Bps"}, {"id": "custom.axisPlacement", "value": "right"}]}]}}))
    P.append(panel(L, "stat", "Units registered", "Units the job registered.",
                   [(f"max(gnmr_units{{{J}}})", "", "A", True)], w=4))
    P.append(panel(L, "stat", "Snapshot age", "Seconds since the job's last successful snapshot.",
                   [(f"max(gnmr_snapshot_age_seconds{{{J}}})", "", "A", True)], w=4, unit="s"))
    variables = [ds_var(), query_var("job", "Job", "label_values(gnmr_units, job_id)"),
                 query_var("unit", "Unit", 'label_values(gnmr_unit_gnmr{job_id="$job"}, unit)',
                           include_all=True, multi=True)]
    return dashboard("gnmr-job", "GNMR job",
                     "One training job under GNMR: recovery budget, units, steps, ranks, latency, client overhead.",
                     P, variables, ["gnmr"])


def daemon_dashboard():
    L = Layout()
    I = 'instance=~"$instance"'
    P = []
    P.append(L.row("Daemon"))
    P.append(panel(L, "stat", "Jobs", "Training jobs known to the daemon.",
                   [(f"sum(gnmr_jobs{{{I}}})", "", "A", True)], w=4, h=5))
    P.append(panel(L, "stat", "Streams", "Live rank Session streams (ranks connected, all jobs).",
                   [(f"sum(gnmr_ranks_connected{{{I}}})", "", "A", True)], w=4, h=5))
    P.append(panel(L, "stat", "Uptime", "Time since gnmrd started.",
                   [(f"time() - max(gnmr_start_time_seconds{{{I}}})", "", "A", True)], w=4, h=5, unit="s"))
    P.append(panel(L, "table", "Version", "gnmrd version by instance.",
                   [(f"max by (instance, version) (gnmr_build_info{{{I}}})", "", "A", True, "table")], w=12, h=5,
                   extra={"transformations": [{"id": "organize", "options": {
                       "excludeByName": {"Time": True, "Value": True}}}]}))
    P.append(panel(L, "timeseries", "Jobs and streams", "Jobs known and live Session streams over time.",
                   [(f"sum(gnmr_jobs{{{I}}})", "jobs"),
                    (f"sum(gnmr_ranks_connected{{{I}}})", "streams")], w=12))
    P.append(panel(L, "timeseries", "Memory", "Resident and virtual memory of gnmrd.",
                   [(f"max by (instance) (gnmr_process_resident_memory_bytes{{{I}}})", "resident {{instance}}"),
                    (f"max by (instance) (gnmr_process_virtual_memory_bytes{{{I}}})", "virtual {{instance}}")],
                   w=8, unit="bytes"))
    P.append(panel(L, "timeseries", "Open file descriptors", "Open file descriptors of gnmrd.",
                   [(f"max by (instance) (gnmr_process_open_fds{{{I}}})", "{{instance}}")], w=4))
    P.append(L.row("RPCs"))
    P.append(panel(L, "timeseries", "RPC rate by method", "Finished RPCs per second by method.",
                   [(f"sum by (method) (rate(gnmr_rpcs_total{{{I}}}[{RI}]))", "{{method}}")], w=8, unit="reqps"))
    P.append(panel(L, "timeseries", "RPC errors by code", "Finished RPCs per second that did not end OK, by method and code.",
                   [(f"sum by (method, code) (rate(gnmr_rpcs_total{{{I}, code!=\"OK\"}}[{RI}]))", "{{method}} {{code}}")],
                   w=8, unit="reqps"))
    P.append(panel(L, "table", "RPCs by method and code", "Finished RPCs since the daemon started.",
                   [(f"sum by (method, code) (gnmr_rpcs_total{{{I}}})", "", "A", True, "table")], w=8,
                   extra={"transformations": [{"id": "organize", "options": {
                       "excludeByName": {"Time": True}, "renameByName": {"Value": "RPCs"}}}]}))
    P.append(L.row("State store"))
    P.append(panel(L, "timeseries", "Snapshot age", "Seconds since each job's last successful snapshot.",
                   [(f"max by (job_id) (gnmr_snapshot_age_seconds{{{I}}})", "{{job_id}}")], w=8, unit="s"))
    P.append(panel(L, "timeseries", "Snapshot writes and failures", "Controller snapshots written and failed per second.",
                   rates(I, [("gnmr_snapshot_writes_total", "written/s"), ("gnmr_snapshot_failures_total", "failed/s")]), w=8, unit="ops"))
    P.append(panel(L, "timeseries", "Event log", "Event log lines written, dropped (buffer full) and lost to write errors.",
                   rates(I, [("gnmr_events_written_total", "written/s"), ("gnmr_events_dropped_total", "dropped/s"), ("gnmr_event_write_failures_total", "write failures/s")]), w=8, unit="ops"))
    variables = [ds_var(), query_var("instance", "Daemon", "label_values(gnmr_build_info, instance)",
                                     include_all=True, multi=True)]
    return dashboard("gnmr-daemon", "GNMR daemon",
                     "gnmrd itself: jobs, streams, RPCs, memory, state store.", P, variables, ["gnmr"])


def render(d):
    return json.dumps(d, indent=2, sort_keys=False) + "\n"


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for name, d in (("gnmr-job.json", job_dashboard()), ("gnmr-daemon.json", daemon_dashboard())):
        with open(os.path.join(here, name), "w") as f:
            f.write(render(d))


if __name__ == "__main__":
    main()
