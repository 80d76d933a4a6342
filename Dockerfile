# ranksight image: the agent and the aggregator (one console script, `ranksight`), non-root by default.
#   docker build -t ranksight .                                  # GPU sources: sysfs and the vendor CLIs
#   docker build --build-arg GPU_VENDOR=nvidia -t ranksight:nvidia .   # + NVML (nvidia-ml-py)
#   docker build --build-arg GPU_VENDOR=amd -t ranksight:amd .         # + amdsmi (needs ROCm's libamd_smi from the host)
#   docker run ranksight aggregator --config /etc/ranksight/aggregator.toml
#   docker run --net=host --pid=host -v /sys:/sys:ro ranksight agent --config /etc/ranksight/agent.toml
# The agent's DaemonSet (deploy/helm/ranksight) runs it as root where it must read other users' processes and devices.

# Stage 1: build the wheel and install it, with its dependencies, into a virtual environment.
FROM python:3.11-slim-bookworm AS build
ARG GPU_VENDOR=none
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src src
RUN case "$GPU_VENDOR" in \
      none) extra="" ;; \
      nvidia|amd) extra="[$GPU_VENDOR]" ;; \
      *) echo "GPU_VENDOR must be none, nvidia or amd, not $GPU_VENDOR" >&2; exit 1 ;; \
    esac \
 && python -m venv /opt/ranksight/venv \
 && /opt/ranksight/venv/bin/pip install --no-compile ".$extra" \
 && /opt/ranksight/venv/bin/python -m compileall -q /opt/ranksight/venv

# Stage 2: the runtime: the virtual environment only (no compiler, no sources), a non-root user.
FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="ranksight" \
      org.opencontainers.image.description="Live diagnosis of RCCL/NCCL training jobs: agent and aggregator"
RUN groupadd --system --gid 10001 ranksight \
 && useradd --system --uid 10001 --gid ranksight --home-dir /var/lib/ranksight --create-home ranksight \
 && mkdir -p /run/ranksight \
 && chown ranksight:ranksight /run/ranksight
COPY --from=build /opt/ranksight/venv /opt/ranksight/venv
ENV PATH=/opt/ranksight/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    RANKSIGHT_STATE_DIR=/var/lib/ranksight \
    RANKSIGHT_AGGREGATOR__HTTP__HOST=0.0.0.0
USER 10001:10001
WORKDIR /var/lib/ranksight
VOLUME ["/var/lib/ranksight"]
# HTTP (web page, API, /metrics) and the agent's link probe server.
EXPOSE 8080 28100
ENTRYPOINT ["ranksight"]
CMD ["aggregator"]
