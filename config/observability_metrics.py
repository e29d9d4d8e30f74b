"""The one catalogue of the metrics the platform's dashboards and alert rules may use.

Every metric name a Prometheus expression in `platform_constructs/observability/` selects
must be a row here (or the `record` name of one of its recording rules), with the labels
its collector gives it; the tests parse every expression and hold it to this table. Each
row says which collector exports the metric and the document the name comes from, so a
metric is only added with a source. CloudWatch metrics (FSx) are a second, smaller table.

Series naming: a histogram `h` is stored as `h_bucket` (with `le`), `h_sum` and `h_count`;
expressions select those series, never `h` itself. Every scraped series also carries the
scrape's target labels (`instance`, `job`); the HyperPod observability add-on adds
`cluster_id` to what it collects (the AWS HyperPod dashboards filter every metric by it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Final

HISTOGRAM_SUFFIXES: Final = ("_bucket", "_sum", "_count")
# The label of a histogram's `_bucket` series.
BUCKET_LABEL: Final = "le"
# Labels Prometheus attaches to every scraped series (the scrape target's).
TARGET_LABELS: Final = frozenset({"instance", "job"})
# Added by the HyperPod observability add-on's collector to every series it remote-writes.
ADDON_LABELS: Final = frozenset({"cluster_id"})


class Kind(StrEnum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


@dataclass(frozen=True, kw_only=True)
class Source:
    """Who exports a metric (`collector`) and where its name and labels are documented;
    `added_labels`: labels the collection path adds to each of its series."""

    collector: str
    document: str
    added_labels: frozenset[str] = field(default=TARGET_LABELS | ADDON_LABELS)


DCGM: Final = Source(
    collector="NVIDIA dcgm-exporter (HyperPod observability add-on)",
    document=(
        "aws/sagemaker-hyperpod-cluster-setup: eks/cloudformation/resources/"
        "grafana-lambda-function/lambda_function/dashboards/templates/cluster.json and "
        "rules/templates/alert-rules.yaml; NVIDIA DCGM field identifiers"
    ),
)
EFA: Final = Source(
    collector=(
        "node exporter with the amazonefa collector (HyperPod observability add-on, "
        "network metrics ADVANCED)"
    ),
    document=(
        "awslabs/awsome-distributed-training: 4.validation_and_observability/"
        "3.efa-node-exporter amazon_efa_linux.go (counters from /sys/class/infiniband/"
        "<device>/ports/<port>/hw_counters)"
    ),
)
NODE_EXPORTER: Final = Source(
    collector="Prometheus node exporter (HyperPod observability add-on)",
    document="prometheus/node_exporter collectors (cpu, meminfo, filesystem, netdev, loadavg)",
)
KUBE_STATE_METRICS: Final = Source(
    collector="kube-state-metrics (HyperPod observability add-on)",
    document="kubernetes/kube-state-metrics docs/metrics (node and pod metrics)",
)
SCRAPER: Final = Source(
    collector="the Prometheus scraper itself (one series per scrape target)",
    document="prometheus.io/docs/concepts/jobs_instances (automatically generated series)",
)
KUEUE: Final = Source(
    collector="Kueue controller manager (HyperPod task governance, metrics ADVANCED)",
    document="kueue.sigs.k8s.io/docs/reference/metrics",
)
TRAINING_OPERATOR: Final = Source(
    collector="HyperPod training operator",
    document=(
        "aws/sagemaker-hyperpod-cluster-setup: eks/cloudformation/resources/"
        "grafana-lambda-function/lambda_function/dashboards/templates/training.json"
    ),
)
TRAINER: Final = Source(
    # Served by training/metrics_export.py, scraped by the platform's managed Prometheus
    # collector (platform_constructs/metrics_scraper.py).
    collector="this project's trainer",
    document=(
        "training/metrics.py: the HPTRAIN step and checkpoint lines and the goodput "
        "definition, exposed as metrics by the project's trainer"
    ),
    # The managed collector's relabelling sets `namespace` and `training_job`; it adds no
    # cluster_id (that is the add-on's), so dashboards do not filter these metrics by it.
    added_labels=TARGET_LABELS,
)


@dataclass(frozen=True, kw_only=True)
class Metric:
    """One metric family: `labels` are the collector's own (without `added_labels`)."""

    name: str
    kind: Kind
    source: Source
    labels: frozenset[str] = frozenset()
    unit: str = ""
    help: str = ""

    def series(self) -> tuple[str, ...]:
        """The names of the series this metric is stored as."""
        if self.kind is Kind.HISTOGRAM:
            return tuple(self.name + suffix for suffix in HISTOGRAM_SUFFIXES)
        return (self.name,)

    def series_labels(self, series: str) -> frozenset[str]:
        """Every label a series of this metric may carry."""
        extra = (
            {BUCKET_LABEL} if series.endswith("_bucket") and self.kind is Kind.HISTOGRAM else set()
        )
        return self.labels | self.source.added_labels | extra


_DCGM_LABELS = frozenset({"gpu", "UUID", "Hostname", "device", "modelName"})
# dcgm-exporter's Kubernetes mapping adds the pod using the GPU (AWS tasks.json dashboard).
_DCGM_POD_LABELS = frozenset({"pod", "namespace", "container"})
_EFA_LABELS = frozenset({"device", "port"})
_KUEUE_QUEUE = frozenset({"cluster_queue"})
# `training_job`, not `job`: Prometheus sets `job` to the scrape job on every series.
_TRAINER_LABELS = frozenset({"training_job", "namespace"})


def _dcgm(name: str, kind: Kind, unit: str, help_: str) -> Metric:
    return Metric(
        name=name,
        kind=kind,
        source=DCGM,
        labels=_DCGM_LABELS | _DCGM_POD_LABELS,
        unit=unit,
        help=help_,
    )


def _efa(name: str, help_: str, unit: str = "") -> Metric:
    return Metric(
        name=name, kind=Kind.COUNTER, source=EFA, labels=_EFA_LABELS, unit=unit, help=help_
    )


def _node(name: str, kind: Kind, labels: frozenset[str], unit: str, help_: str) -> Metric:
    return Metric(name=name, kind=kind, source=NODE_EXPORTER, labels=labels, unit=unit, help=help_)


def _trainer(name: str, kind: Kind, unit: str, help_: str) -> Metric:
    return Metric(
        name=name, kind=kind, source=TRAINER, labels=_TRAINER_LABELS, unit=unit, help=help_
    )


_FILESYSTEM = frozenset({"device", "fstype", "mountpoint"})

_METRICS: tuple[Metric, ...] = (
    # NVIDIA DCGM (dcgm-exporter).
    _dcgm("DCGM_FI_DEV_GPU_UTIL", Kind.GAUGE, "percent", "GPU utilization"),
    _dcgm("DCGM_FI_DEV_FB_USED", Kind.GAUGE, "MiB", "framebuffer memory used"),
    _dcgm("DCGM_FI_DEV_FB_FREE", Kind.GAUGE, "MiB", "framebuffer memory free"),
    _dcgm(
        "DCGM_FI_DEV_XID_ERRORS",
        Kind.GAUGE,
        "",
        "value of the last XID error the GPU reported (an XID code, not a count)",
    ),
    _dcgm("DCGM_FI_DEV_GPU_TEMP", Kind.GAUGE, "celsius", "GPU temperature"),
    _dcgm("DCGM_FI_DEV_POWER_USAGE", Kind.GAUGE, "watts", "GPU power draw"),
    _dcgm(
        "DCGM_FI_DEV_THERMAL_VIOLATION",
        Kind.COUNTER,
        "microseconds",
        "time the GPU was throttled by thermal constraints",
    ),
    _dcgm(
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        Kind.COUNTER,
        "",
        "volatile double-bit (uncorrectable) ECC errors since the last driver load",
    ),
    _dcgm(
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        Kind.COUNTER,
        "",
        "NVLink recovery errors over all links",
    ),
    _dcgm(
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        Kind.COUNTER,
        "",
        "memory rows remapped because of uncorrectable errors",
    ),
    _dcgm(
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        Kind.GAUGE,
        "",
        "1 when a row remapping failed (the GPU needs replacing)",
    ),
    _dcgm(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        Kind.GAUGE,
        "ratio",
        "fraction of cycles the tensor pipes were active",
    ),
    # Amazon EFA (node exporter amazonefa collector): all counters.
    _efa("node_amazonefa_rx_bytes", "bytes received", "bytes"),
    _efa("node_amazonefa_tx_bytes", "bytes transmitted", "bytes"),
    _efa("node_amazonefa_recv_bytes", "bytes received by receive work requests", "bytes"),
    _efa("node_amazonefa_send_bytes", "bytes sent by send work requests", "bytes"),
    _efa("node_amazonefa_rx_drops", "packets dropped on receive"),
    _efa("node_amazonefa_rx_pkts", "packets received"),
    _efa("node_amazonefa_tx_pkts", "packets transmitted"),
    _efa("node_amazonefa_rdma_read_bytes", "bytes read with RDMA", "bytes"),
    _efa("node_amazonefa_rdma_write_bytes", "bytes written with RDMA", "bytes"),
    _efa("node_amazonefa_rdma_read_wr_err", "RDMA read work requests that failed"),
    _efa("node_amazonefa_rdma_write_wr_err", "RDMA write work requests that failed"),
    # The next four are hw_counters of newer EFA drivers; the exporter exposes them when
    # the driver does.
    _efa("node_amazonefa_retrans_pkts", "packets retransmitted"),
    _efa("node_amazonefa_retrans_timeout_events", "retransmission timeouts"),
    _efa(
        "node_amazonefa_impaired_remote_conn_events",
        "connections to a remote peer that became impaired",
    ),
    _efa("node_amazonefa_unresponsive_remote_events", "remote peers that stopped responding"),
    Metric(
        name="node_amazonefa_info",
        kind=Kind.GAUGE,
        source=EFA,
        labels=frozenset({"device"}),
        help="one series per EFA device, value always 1",
    ),
    # Node exporter.
    _node(
        "node_cpu_seconds_total", Kind.COUNTER, frozenset({"cpu", "mode"}), "seconds", "CPU time"
    ),
    _node("node_memory_MemTotal_bytes", Kind.GAUGE, frozenset(), "bytes", "memory total"),
    _node("node_memory_MemFree_bytes", Kind.GAUGE, frozenset(), "bytes", "memory free"),
    _node("node_memory_MemAvailable_bytes", Kind.GAUGE, frozenset(), "bytes", "memory available"),
    _node("node_filesystem_size_bytes", Kind.GAUGE, _FILESYSTEM, "bytes", "filesystem size"),
    _node(
        "node_filesystem_avail_bytes",
        Kind.GAUGE,
        _FILESYSTEM,
        "bytes",
        "filesystem space available to non-root users",
    ),
    _node(
        "node_network_receive_bytes_total",
        Kind.COUNTER,
        frozenset({"device"}),
        "bytes",
        "bytes received per network device",
    ),
    _node(
        "node_network_transmit_bytes_total",
        Kind.COUNTER,
        frozenset({"device"}),
        "bytes",
        "bytes transmitted per network device",
    ),
    _node("node_load5", Kind.GAUGE, frozenset(), "", "5-minute load average"),
    _node("node_load15", Kind.GAUGE, frozenset(), "", "15-minute load average"),
    # kube-state-metrics.
    Metric(
        name="kube_node_info",
        kind=Kind.GAUGE,
        source=KUBE_STATE_METRICS,
        labels=frozenset(
            {
                "node",
                "kernel_version",
                "os_image",
                "container_runtime_version",
                "kubelet_version",
                "kubeproxy_version",
                "provider_id",
                "pod_cidr",
                "internal_ip",
                "system_uuid",
                # Added by the HyperPod add-on (the AWS dashboards select clusters by it).
                "cluster_name",
            }
        ),
        help="one series per node, value 1",
    ),
    Metric(
        name="kube_node_status_condition",
        kind=Kind.GAUGE,
        source=KUBE_STATE_METRICS,
        labels=frozenset({"node", "condition", "status"}),
        help="1 for the node condition's current status (true, false, unknown)",
    ),
    Metric(
        name="kube_pod_container_status_restarts_total",
        kind=Kind.COUNTER,
        source=KUBE_STATE_METRICS,
        labels=frozenset({"namespace", "pod", "uid", "container"}),
        help="container restarts",
    ),
    # The object that owns each pod (a HyperPodPyTorchJob or Job for a training pod): the
    # GPU accounting rules name a pod's job by it.
    Metric(
        name="kube_pod_owner",
        kind=Kind.GAUGE,
        source=KUBE_STATE_METRICS,
        labels=frozenset(
            {"namespace", "pod", "uid", "owner_kind", "owner_name", "owner_is_controller"}
        ),
        help="one series per pod and owner, value 1",
    ),
    Metric(
        name="up",
        kind=Kind.GAUGE,
        source=SCRAPER,
        help="1 if the last scrape of the target succeeded, else 0",
    ),
    # Kueue.
    Metric(
        name="kueue_pending_workloads",
        kind=Kind.GAUGE,
        source=KUEUE,
        labels=_KUEUE_QUEUE | {"status"},
        help="pending workloads per ClusterQueue; status: active or inadmissible",
    ),
    Metric(
        name="kueue_admitted_workloads_total",
        kind=Kind.COUNTER,
        source=KUEUE,
        labels=_KUEUE_QUEUE,
        help="workloads admitted",
    ),
    Metric(
        name="kueue_admitted_active_workloads",
        kind=Kind.GAUGE,
        source=KUEUE,
        labels=_KUEUE_QUEUE,
        help="admitted workloads that are active (not finished)",
    ),
    Metric(
        name="kueue_cluster_queue_status",
        kind=Kind.GAUGE,
        source=KUEUE,
        labels=_KUEUE_QUEUE | {"status"},
        help="1 for the ClusterQueue's current status (pending, active, terminated)",
    ),
    Metric(
        name="kueue_evicted_workloads_total",
        kind=Kind.COUNTER,
        source=KUEUE,
        labels=_KUEUE_QUEUE | {"reason"},
        help="workloads evicted, by reason (e.g. Preempted, PodsReadyTimeout)",
    ),
    Metric(
        name="kueue_admission_wait_time_seconds",
        kind=Kind.HISTOGRAM,
        source=KUEUE,
        labels=_KUEUE_QUEUE,
        unit="seconds",
        help="time from a workload's creation or requeue to its admission",
    ),
    # HyperPod training operator.
    Metric(
        name="hyperpod_training_operator_jobs_created_total",
        kind=Kind.COUNTER,
        source=TRAINING_OPERATOR,
        labels=frozenset({"jobName"}),
        help="training jobs created",
    ),
    Metric(
        name="hyperpod_training_operator_jobs_successful_total",
        kind=Kind.COUNTER,
        source=TRAINING_OPERATOR,
        labels=frozenset({"jobName"}),
        help="training jobs completed",
    ),
    Metric(
        name="hyperpod_training_operator_jobs_failed_total",
        kind=Kind.COUNTER,
        source=TRAINING_OPERATOR,
        labels=frozenset({"jobName"}),
        help="training jobs failed",
    ),
    Metric(
        name="hyperpod_training_operator_jobs_deleted_total",
        kind=Kind.COUNTER,
        source=TRAINING_OPERATOR,
        labels=frozenset({"jobName"}),
        help="training jobs deleted",
    ),
    Metric(
        name="hyperpod_training_operator_jobs_restarted_total",
        kind=Kind.COUNTER,
        source=TRAINING_OPERATOR,
        labels=frozenset({"jobName", "reason"}),
        help="automatic job restarts, by fault reason",
    ),
    Metric(
        name="hyperpod_training_operator_jobs_restart_latency",
        kind=Kind.HISTOGRAM,
        source=TRAINING_OPERATOR,
        labels=frozenset({"jobName"}),
        help="time from a fault to the job running again",
    ),
    # This project's trainer.
    _trainer("hptrain_step_seconds", Kind.GAUGE, "seconds", "duration of the last step"),
    _trainer("hptrain_tokens_per_second", Kind.GAUGE, "tokens/s", "throughput of the last step"),
    _trainer(
        "hptrain_goodput_ratio",
        Kind.GAUGE,
        "ratio",
        "productive step time / wall time since the job start (training/metrics.py)",
    ),
    _trainer(
        "hptrain_checkpoint_blocking_seconds",
        Kind.GAUGE,
        "seconds",
        "time the last checkpoint blocked training",
    ),
    _trainer("hptrain_checkpoints_committed_total", Kind.COUNTER, "", "checkpoints committed"),
    _trainer("hptrain_checkpoints_failed_total", Kind.COUNTER, "", "checkpoints that failed"),
    Metric(
        name="hptrain_badput_seconds_total",
        kind=Kind.COUNTER,
        source=TRAINER,
        labels=_TRAINER_LABELS | {"cause"},
        unit="seconds",
        help="wall time since the job start that no surviving step used, by cause "
        "(training/badput.py)",
    ),
    # The last in-process recovery's phases (training/recovery/record.py), one gauge each.
    *(
        _trainer(f"hptrain_recovery_{phase}_seconds", Kind.GAUGE, "seconds", f"{phase} phase")
        for phase in ("detect", "abort", "rendezvous", "state_transfer", "first_step")
    ),
)

METRICS: Final[Mapping[str, Metric]] = MappingProxyType({m.name: m for m in _METRICS})
# Series name -> its metric (a histogram has three series).
SERIES: Final[Mapping[str, Metric]] = MappingProxyType(
    {series: m for m in _METRICS for series in m.series()}
)


def series_labels(series: str) -> frozenset[str] | None:
    """The labels a catalogued series may carry, or None if the series is not catalogued."""
    metric = SERIES.get(series)
    return None if metric is None else metric.series_labels(series)


@dataclass(frozen=True, kw_only=True)
class CloudWatchMetric:
    namespace: str
    name: str
    dimensions: frozenset[str]
    statistics: frozenset[str]
    unit: str
    document: str


_FSX_DOC = "docs.aws.amazon.com/fsx/latest/LustreGuide/fs-metrics.html"
_FSX_STATS = frozenset({"Sum", "Minimum", "Maximum", "Average", "SampleCount"})
FSX_NAMESPACE: Final = "AWS/FSx"

_CLOUDWATCH: tuple[CloudWatchMetric, ...] = (
    # Sum: the file system's total free bytes.
    CloudWatchMetric(
        namespace=FSX_NAMESPACE,
        name="FreeDataStorageCapacity",
        dimensions=frozenset({"FileSystemId"}),
        statistics=_FSX_STATS,
        unit="bytes",
        document=_FSX_DOC,
    ),
    # Sum / PERIOD: read and write throughput in bytes per second.
    CloudWatchMetric(
        namespace=FSX_NAMESPACE,
        name="DataReadBytes",
        dimensions=frozenset({"FileSystemId"}),
        statistics=_FSX_STATS,
        unit="bytes",
        document=_FSX_DOC,
    ),
    CloudWatchMetric(
        namespace=FSX_NAMESPACE,
        name="DataWriteBytes",
        dimensions=frozenset({"FileSystemId"}),
        statistics=_FSX_STATS,
        unit="bytes",
        document=_FSX_DOC,
    ),
)

CLOUDWATCH_METRICS: Final[Mapping[tuple[str, str], CloudWatchMetric]] = MappingProxyType(
    {(m.namespace, m.name): m for m in _CLOUDWATCH}
)
