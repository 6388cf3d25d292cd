# One image for the API, the workers and the demo backend; the command picks the role.
FROM python:3.11-slim

COPY --from=ghcr.io/astral-sh/uv:0.13 /uv /usr/local/bin/uv
ENV UV_COMPILE_BYTECODE=1 UV_LINK_MODE=copy PATH="/app/.venv/bin:$PATH"
WORKDIR /app

# Dependencies first, so code changes do not rebuild them; none of the default groups (the tests' tools, the
# embedded Valkey `mcp-batch dev` falls back on). The `tracing` extra (the OpenTelemetry SDK and its OTLP
# exporter) is only set up when OTEL_* variables ask for traces.
COPY pyproject.toml uv.lock README.md ./
RUN uv sync --locked --no-default-groups --extra tracing --no-install-project

COPY mcp_batch ./mcp_batch
COPY service ./service
COPY worker ./worker
COPY mcp_batch_cli ./mcp_batch_cli
COPY demo ./demo
COPY examples ./examples
RUN uv sync --locked --no-default-groups --extra tracing

RUN useradd --create-home --uid 10001 app
USER app
# Logs as one JSON object per line; 8000 is the API (and its /metrics), 9464 a worker's Prometheus metrics.
ENV MCP_BATCH_LOG_FORMAT=json MCP_BATCH_WORKER_METRICS_PORT=9464
EXPOSE 8000 9464
CMD ["mcp-batch", "api", "--host", "0.0.0.0", "--port", "8000"]
