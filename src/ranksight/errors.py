"""Every ranksight exception, as one tree, and what each user-facing one means to a command's exit status and to a
query's API status (the one table; :func:`exit_status`, :func:`api_status`). Classes live beside the code that raises
them; the categories below are declared here. Each keeps the builtin base it always had (``ValueError``...), so older
``except`` clauses still match::

    RanksightError
    ├── UsageError                  asked wrongly: exit 2, API 400
    │   ├── ConfigError             ranksight.core.config: an invalid config file or environment
    │   ├── RequestError            ranksight.api.contract: a query parameter the endpoint cannot answer as asked
    │   └── HostsFileError          ranksight.deploy.hosts: a hosts file line or --jump value that is not [user@]host[:port]
    ├── RefusedError                well-formed but not allowed: exit 1, API 403
    │   ├── Forbidden               ranksight.aggregator.api.endpoint: a path outside the export root
    │   ├── SqlRefused              ranksight.aggregator.api.sql: not a plain read-only query (also a SqlError)
    │   └── TargetRefused           ranksight.agent.probe.targets: a probe command this agent will not run
    ├── QueryFailed                 an allowed query that failed: exit 1, API 422
    │   ├── JobNotFound             ranksight.aggregator.report.data: no history names the job a report is asked for
    │   └── SqlFailed               ranksight.aggregator.api.sql: DuckDB failed it (syntax, unknown column, time limit; a SqlError)
    │       └── _FileVanished       ranksight.aggregator.api.sql: a file it was planned over could not be read (exports: tried again)
    ├── NoEndpoint                  nothing answers at the address asked: exit 3
    │   ├── RasRefused              ranksight.agent.collectors.ras.errors: no listener on any address of the endpoint (RasClientError)
    │   └── RasTimeout              ranksight.agent.collectors.ras.errors: connect or reply deadline passed (RasClientError)
    ├── ParseError                  bytes or text from outside that a parser does not understand
    │   ├── DecodeError             ranksight.schemas.codec: not a valid envelope
    │   ├── SubjectError            ranksight.schemas.subjects: not a subject the helper builds
    │   ├── ProbeProtocolError      ranksight.agent.probe.protocol: not a probe frame (magic, op, status, size)
    │   ├── GpuProbeProtocolError   ranksight.agent.gpuprobe.protocol: a worker line that is not a protocol message
    │   ├── InspectorParseError     ranksight.formats.inspector: not an Inspector record
    │   ├── InspectorMetricsError   ranksight.agent.collectors.inspector.metrics: not an Inspector textfile or OTLP body
    │   ├── DumpError               ranksight.core.flightrec.load: not a Flight Recorder dump (or one too large)
    │   ├── AppMessageError         ranksight.agent.collectors.app_parse: not a client message
    │   ├── KmsgParseError          ranksight.agent.collectors.xid_parse: not a /dev/kmsg record
    │   ├── GpuToolParseError       ranksight.agent.collectors.gpu.amd_smi: GPU tool output (amd-smi, rocm-smi, nvidia-smi)
    │   ├── ToolParseError          ranksight.agent.collectors.nic.tools: NIC tool output
    │   └── RasParseError           ranksight.agent.collectors.ras.errors: not a RAS status / monitor output (also a RasError)
    ├── CollectorUnavailable        ranksight.agent.collectors.base: the source is not on this node (reported as absent)
    │   ├── AmdSmiUnavailable       ranksight.agent.collectors.gpu.amdsmi_lib: no amdsmi library or amdgpu driver
    │   └── NvmlUnavailable         ranksight.agent.collectors.gpu.nvml: no nvidia-ml-py or NVML
    ├── CommandFailed               ranksight.agent.collectors.command: a tool exited non-zero, timed out or did not start
    ├── OtlpRefused                 ranksight.agent.collectors.inspector.otlp: a request the OTLP receiver answers with an HTTP error
    ├── PluginError                 ranksight.simulate.inspector_plugin: the real Inspector plugin could not be loaded or refused a call
    ├── RasError                    ranksight.agent.collectors.ras.errors: the RAS tree
    │   ├── RasParseError           (above)
    │   └── RasClientError          talking to a RAS endpoint failed
    │       ├── RasRefused          (above)
    │       ├── RasTimeout          (above)
    │       ├── RasReset            the connection closed before the reply was complete
    │       ├── RasReplyError       the server answered ERROR: ...
    │       └── RasOversized        the reply exceeded the configured byte limit
    ├── ProbeError                  ranksight.agent.probe.client: a probe could not be completed
    ├── SqlError                    ranksight.aggregator.api.sql: base of SqlRefused and SqlFailed (above)
    ├── PageExpired                 ranksight.aggregator.api.paging: a next token unknown, expired or dropped
    ├── RowTooLarge                 ranksight.aggregator.api.paging: one row alone does not fit in a message
    ├── ApiUnavailable              ranksight.api.client: no aggregator answered
    │   └── MalformedAnswer         ranksight.api.client: the answer is not the API's response shape
    ├── ActionFailed                ranksight.aggregator.actions.model: an action's try failed (retried, bounded)
    ├── ActionRefused               ranksight.aggregator.actions.model: an action must not be taken (drained by someone else)
    ├── RawFetchError               ranksight.aggregator.raw_evidence: an agent's raw records could not be had
    ├── NatsUnreachable             ranksight.core.natsconn: no NATS connection (every server refused, or none in time)
    │   └── NatsUrlError            ranksight.core.natsconn: nats.url is not a list of NATS URLs (a UsageError: exit 2)
    ├── NatsServerError             ranksight.core.natsserver: the server binary is missing or did not start or stop
    ├── MissingBucketError          ranksight.core.kvlease: a KV bucket this process only uses is not there yet
    ├── HostFailed                  ranksight.deploy.ssh: one host's rollout step failed
    └── WheelError                  ranksight.deploy.wheel: the wheel could not be built

A class not under a category with a status is an internal failure when it ends a command or a query: exit 1, API 500.
"""

from __future__ import annotations

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
EXIT_NO_ENDPOINT = 3  # `ranksight ras`: nothing listens at the endpoint
EXIT_INTERRUPTED = 130  # 128 + SIGINT


class RanksightError(Exception):
    """The root: ``except RanksightError`` catches every error ranksight raises on purpose."""


class UsageError(RanksightError):
    """The user asked for something malformed (a setting, a parameter, a hosts line); the message says what."""


class RefusedError(RanksightError):
    """A well-formed request for something ranksight does not allow; the message says why."""


class QueryFailed(RanksightError):
    """An allowed query that failed while it ran."""


class NoEndpoint(RanksightError):
    """Nothing answers at the address the user gave."""


class ParseError(RanksightError, ValueError):
    """Bytes or text from outside (a tool, a peer, a file) that a parser does not understand; the message says why."""


# The one table of what a user-facing error means; the most specific category of an exception decides.
EXIT_STATUS: dict[type[RanksightError], int] = {
    UsageError: EXIT_USAGE,
    NoEndpoint: EXIT_NO_ENDPOINT,
    RanksightError: EXIT_FAILED,
}
API_STATUS: dict[type[RanksightError], tuple[int, str]] = {
    UsageError: (400, "bad request"),
    RefusedError: (403, "refused"),
    QueryFailed: (422, "query failed"),
}


def exit_status(exc: BaseException) -> int:
    """The exit status of a command that ``exc`` ended (1 for anything not in :data:`EXIT_STATUS`)."""
    return next((EXIT_STATUS[c] for c in type(exc).__mro__ if c in EXIT_STATUS), EXIT_FAILED)


def api_status(exc: BaseException) -> tuple[int, str] | None:
    """The API status and message prefix of a query that ``exc`` ended; None: an internal error (500)."""
    return next((API_STATUS[c] for c in type(exc).__mro__ if c in API_STATUS), None)
