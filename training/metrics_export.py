"""The trainer's step, checkpoint and goodput figures as a Prometheus endpoint.

The platform's managed Prometheus collector (stacks/observability_stack.py) scrapes every pod
carrying the platform's metrics label on its named metrics port and adds `namespace` and
`training_job` to each series; the exporter itself sets no labels.

Who serves and who reports (`start`):
- `metrics.port=0` (the default): nothing is served.
- Local rank 0 of each node serves one endpoint per pod, so every pod the collector finds
  answers its scrape (`up` is 1 for each) and no two ranks of a node fight over the port.
- Only global rank 0 reports values: it is the rank that prints the HPTRAIN step and
  checkpoint lines (training/metrics.py) and keeps the run ledger goodput comes from. The other
  nodes serve an empty page, so each job has exactly one series per metric and dashboards may
  `sum` or `avg` over a job without counting a node twice. When a restart moves rank 0 to
  another pod, the old pod's series go stale and the new pod's take over.

Failure behaviour: metrics never stop training. A port that cannot be bound (in use, or no
permission) gives one `hptrain: metrics ...` line on stderr and the run goes on without the
endpoint; the collector then reports `up == 0` for that pod, which is how an operator sees
it. A restart would hit the same conflict, so exiting would only cost the job its progress.

The metric names are the platform catalogue's `hptrain_*` rows (config/observability_metrics.py).
The image copies only training/, so they are written here as well; a test holds the two
tables equal.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final, Literal
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from training.badput import CAUSES

Kind = Literal["gauge", "counter"]

# Listen on every interface: the collector reaches the pod at its IP.
BIND_ADDRESS: Final = "0.0.0.0"  # noqa: S104 - a pod's own network namespace


@dataclass(frozen=True)
class MetricSpec:
    """One exported metric: `name` as stored (a counter's ends in `_total`), its kind and help."""

    name: str
    kind: Kind
    help: str
    # A label whose values split the series (a counter per cause); None: one series.
    label: str | None = None


STEP_SECONDS: Final = MetricSpec("hptrain_step_seconds", "gauge", "Duration of the last step.")
TOKENS_PER_SECOND: Final = MetricSpec(
    "hptrain_tokens_per_second", "gauge", "Throughput of the last step (global tokens/s)."
)
GOODPUT_RATIO: Final = MetricSpec(
    "hptrain_goodput_ratio",
    "gauge",
    "Productive step time / wall time since the job start (training/metrics.py).",
)
CHECKPOINT_BLOCKING_SECONDS: Final = MetricSpec(
    "hptrain_checkpoint_blocking_seconds", "gauge", "Time the last checkpoint blocked training."
)
CHECKPOINTS_COMMITTED: Final = MetricSpec(
    "hptrain_checkpoints_committed_total", "counter", "Checkpoints committed by this process."
)
CHECKPOINTS_FAILED: Final = MetricSpec(
    "hptrain_checkpoints_failed_total", "counter", "Checkpoints that failed in this process."
)
# The last in-process recovery's seconds per phase (training/recovery/record.py), one
# gauge each: the catalogue's trainer rows carry no labels of their own.
RECOVERY_PHASES: Final = ("detect", "abort", "rendezvous", "state_transfer", "first_step")
RECOVERY_PHASE_SECONDS: Final = {
    phase: MetricSpec(
        f"hptrain_recovery_{phase}_seconds",
        "gauge",
        f"Seconds of the {phase} phase of the last in-process recovery.",
    )
    for phase in RECOVERY_PHASES
}
BADPUT_SECONDS: Final = MetricSpec(
    "hptrain_badput_seconds_total",
    "counter",
    "Wall time since the job start that no surviving step used, by cause (training/badput.py).",
    label="cause",
)
METRICS: Final[tuple[MetricSpec, ...]] = (
    STEP_SECONDS,
    TOKENS_PER_SECOND,
    GOODPUT_RATIO,
    CHECKPOINT_BLOCKING_SECONDS,
    CHECKPOINTS_COMMITTED,
    CHECKPOINTS_FAILED,
    *RECOVERY_PHASE_SECONDS.values(),
    BADPUT_SECONDS,
)

_COUNTER_SUFFIX: Final = "_total"


class TrainingMetrics:
    """The values one process reports, and (once served) its endpoint.

    `publish`: whether this process reports anything (global rank 0); the `record_*` methods
    are no-ops otherwise. Gauges appear once first set, so a scrape before the first step
    shows no zero that was never measured; counters start at 0 so the first increment counts.
    """

    def __init__(self, *, publish: bool) -> None:
        self.publish = publish
        self._lock = threading.Lock()
        self._gauges: dict[str, float] = {}
        self._counters: dict[str, int] = (
            {m.name: 0 for m in METRICS if m.kind == "counter" and m.label is None}
            if publish
            else {}
        )
        # Seconds by cause since the job start: every cause from 0, so a rate is defined.
        self._badput: dict[str, float] = dict.fromkeys(CAUSES, 0.0) if publish else {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    # ---- what the trainer reports ---------------------------------------------------------

    def record_step(self, step_time_s: float, tokens_per_s: float, goodput: float) -> None:
        if not self.publish:
            return
        with self._lock:
            self._gauges[STEP_SECONDS.name] = step_time_s
            self._gauges[TOKENS_PER_SECOND.name] = tokens_per_s
            self._gauges[GOODPUT_RATIO.name] = goodput

    def record_checkpoint(self, blocking_s: float, *, committed: bool) -> None:
        if not self.publish:
            return
        counter = CHECKPOINTS_COMMITTED if committed else CHECKPOINTS_FAILED
        with self._lock:
            self._gauges[CHECKPOINT_BLOCKING_SECONDS.name] = blocking_s
            self._counters[counter.name] += 1

    def record_recovery(self, phases_s: dict[str, float]) -> None:
        """The phases of the last in-process recovery, replacing the one before."""
        if not self.publish:
            return
        with self._lock:
            for phase, spec in RECOVERY_PHASE_SECONDS.items():
                self._gauges.pop(spec.name, None)
                if phase in phases_s:
                    self._gauges[spec.name] = phases_s[phase]

    def record_badput(self, seconds_by_cause: dict[str, float]) -> None:
        """The job's badput so far by cause; a counter never goes down (a cause's estimate
        may, when the mean step time it uses changes)."""
        if not self.publish:
            return
        with self._lock:
            for cause, seconds in seconds_by_cause.items():
                self._badput[cause] = max(self._badput.get(cause, 0.0), seconds)

    # ---- the prometheus_client collector interface ------------------------------------------

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            gauges, counters, badput = dict(self._gauges), dict(self._counters), dict(self._badput)
        for spec in METRICS:
            if spec is BADPUT_SECONDS and badput:
                by_cause = CounterMetricFamily(
                    spec.name.removesuffix(_COUNTER_SUFFIX), spec.help, labels=[spec.label or ""]
                )
                for cause, seconds in badput.items():
                    by_cause.add_metric([cause], seconds)
                yield by_cause
            elif spec.name in gauges:
                yield GaugeMetricFamily(spec.name, spec.help, value=gauges[spec.name])
            elif spec.name in counters:
                # The family is named without the suffix; the exposition adds it back.
                family = spec.name.removesuffix(_COUNTER_SUFFIX)
                yield CounterMetricFamily(family, spec.help, value=counters[spec.name])

    # ---- the endpoint ---------------------------------------------------------------------

    def serve(self, port: int, addr: str = BIND_ADDRESS) -> bool:
        """Serve the registry on `port` in a daemon thread; False (and one line on stderr)
        when the port cannot be bound."""
        try:
            self.server, self._thread = start_http_server(port, addr=addr, registry=self.registry)
        except OSError as e:
            sys.stderr.write(
                f"hptrain: metrics port {port} unavailable ({e.strerror or e}); "
                "training continues without the metrics endpoint\n"
            )
            sys.stderr.flush()
            return False
        return True

    @property
    def port(self) -> int | None:
        """The port served on (the bound one when asked for 0), None when not serving."""
        return None if self.server is None else int(self.server.server_address[1])

    def close(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None


def start(port: int, *, rank: int, local_rank: int, addr: str = BIND_ADDRESS) -> TrainingMetrics:
    """The metrics of this process, served when `port` is set and this is local rank 0.

    Global rank 0 reports; every other process's `record_*` calls do nothing. Never raises
    for the endpoint: see the module docstring."""
    exporter = TrainingMetrics(publish=port != 0 and rank == 0)
    if port != 0 and local_rank == 0:
        exporter.serve(port, addr)
    return exporter
