# Prometheus from Debian 12's package, a stand-in for prom/prometheus where
# no registry is reachable (scripts/deploy_check.sh runs the compose stack
# with it). The same interface as the upstream image: /usr/bin/prometheus
# as the entrypoint, config at /etc/prometheus/prometheus.yml, data in
# /prometheus, a non-root user. Build from this directory:
#
#   docker build -f prometheus.Dockerfile -t gnmr/prometheus:debian12 .
ARG DEBIAN_IMAGE=debian:12-slim
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o prometheus -g prometheus -m 0755 /prometheus
USER prometheus
WORKDIR /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
