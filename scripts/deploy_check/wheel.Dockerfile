# The clean machine of the wheel check (scripts/deploy_check/wheel.sh): the
# Debian 12 base with Python and its venv module, and nothing the build
# had: no gRPC, protobuf, spdlog, CUDA or compiler.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/*
