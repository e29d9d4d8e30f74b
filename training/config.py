"""Typed job configuration: the sections' dataclasses, their checks and ``section.field=value``
overrides. The named presets and build_config are in training/presets.py, the checkpoint
section in training/checkpoint/config.py.

One way to override: ``--set training.steps=40`` (repeatable). Values are coerced to the
declared field type, so a typo or a bad value fails before any process group is created.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from training.checkpoint.config import CheckpointConfig, checkpoint_roots, tier_key
from training.config_parsing import ConfigError, parse_value
from training.environment import MLFLOW_TRACKING_URI_ENV


@dataclass
class ModelConfig:
    dim: int = 64
    n_layers: int = 2
    n_heads: int = 4
    # Grouped-query attention: fewer K/V heads than query heads; None means n_heads (plain MHA).
    n_kv_heads: int | None = None
    vocab_size: int = 1024
    # SwiGLU hidden width; None derives the Llama rule (8/3 * dim rounded up to multiple_of).
    ffn_hidden: int | None = None
    multiple_of: int = 32
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    init_std: float = 0.02


def ffn_hidden_dim(cfg: ModelConfig) -> int:
    """The SwiGLU hidden width: model.ffn_hidden, else Llama's 8/3 * dim rounded up to a
    multiple of model.multiple_of."""
    if cfg.ffn_hidden is not None:
        return cfg.ffn_hidden
    hidden = int(2 * (4 * cfg.dim) / 3)
    return cfg.multiple_of * ((hidden + cfg.multiple_of - 1) // cfg.multiple_of)


@dataclass
class DataConfig:
    # "synthetic" (generated, for tests), "memmap" (token shards *.bin in `path`, a local or
    # FSx directory) or "s3" (the same shards under an s3://bucket/prefix `path`, read by
    # range). training.prepare_data writes the shards.
    source: str = "synthetic"
    path: str = ""
    # Held-out shards for the evaluation after durable checkpoints (eval.batches), in the
    # form `source` reads; "" = samples the synthetic source never trains on (synthetic only).
    eval_path: str = ""
    # Batches a background thread reads ahead of the step (0 = read inline in the step).
    # Read-ahead batches do not count as consumed: the saved position stays exact.
    prefetch_batches: int = 2
    # Token dtype of the shard files: uint16 (vocab < 65536) or uint32.
    dtype: str = "uint16"
    # Number of samples of the synthetic source (an epoch).
    synthetic_samples: int = 4096
    seed: int = 1234


@dataclass
class TrainingConfig:
    steps: int = 40
    global_batch_size: int = 8
    seq_len: int = 64
    seed: int = 42
    grad_clip: float = 1.0
    # Intra-op threads per rank on CPU; 0 = cores / local ranks (keeps runs reproducible
    # because the thread count, and thus reduction splits, is the same on every restart).
    cpu_threads: int = 0
    # Deterministic kernels (torch.use_deterministic_algorithms, a fixed cuBLAS workspace):
    # on GPU, a resumed run then matches an uninterrupted one bit for bit. Slower.
    deterministic: bool = False
    # Sequences per forward/backward pass on a rank: a step accumulates the gradients of
    # (global_batch_size / world size) / micro_batch_size passes. 0 = the rank's whole batch in
    # one pass. An upper bound: a rank with fewer sequences runs them in one pass.
    micro_batch_size: int = 0
    # Cross-entropy over chunks of this many tokens (model.chunked_cross_entropy): the logits
    # exist in fp32 for one chunk at a time and none are kept for backward. 0 = plain loss over
    # the full logits (a batch x seq_len x vocab_size fp32 tensor and its copies). Without
    # tensor parallelism only: under TP the loss is vocabulary-parallel (chunked_loss_tokens).
    loss_chunk_tokens: int = 0
    # Hugging Face Llama checkpoint (safetensors; a local or FSx directory, or s3://...) to
    # start from instead of random weights; "" = random init. Read only when the run has no
    # checkpoint of its own to resume (training/init_from.py).
    init_from: str = ""
    # FP8 matmuls in the decoder's large linear layers (training/float8.py: torchao's float8
    # training, FP8 weight all-gathers under FSDP2). Needs GPUs of compute capability 8.9 or
    # later (H100, H200); refused elsewhere.
    float8: bool = False


@dataclass
class OptimConfig:
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 5
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8


@dataclass
class ParallelConfig:
    # The device mesh is dp_replicate x dp_shard x tp ranks (`JobConfig.mesh_shape`).
    # HSDP: parameters sharded over dp_shard ranks, replicated across dp_replicate groups.
    # Either data-parallel size may be -1: the rest of the world, whatever its size (an
    # elastic job fixes dp_shard to a node's GPUs and lets dp_replicate follow the nodes).
    dp_replicate: int = 1
    dp_shard: int = -1
    # Tensor-parallel degree: each layer's weights split over `tp` ranks of one node, which
    # see the same batch.
    tp: int = 1
    # "auto" = bf16 params/compute with fp32 reductions on GPU, fp32 on CPU.
    mixed_precision: str = "auto"
    # Decoder layers that recompute their activations in backward (less memory, about a third
    # more forward compute in those layers): "none", "all", "every:K" (layers 0, K, 2K, ...) or
    # "first:N" (layers 0 to N-1). true/false (the old boolean) read as all/none.
    activation_checkpoint: str = "none"
    compile: bool = False
    # Where compiled code is kept (Inductor's caches, TORCHINDUCTOR_CACHE_DIR), so a restarted
    # process loads it instead of compiling again: a node-local directory that outlives the
    # process (HPTRAIN_COMPILE_CACHE_DIR in a job). "" = torch's default, under /tmp.
    compile_cache_dir: str = ""


@dataclass
class FaultConfig:
    # Watchdog: exit non-zero when no step completes for this many seconds (0 = off).
    watchdog_s: float = 600.0
    # After SIGTERM: finish the step, save, exit 0; hard exit if this is exceeded.
    sigterm_grace_s: float = 120.0
    # What a dead rank costs: "restart" (every rank restarts from a checkpoint tier) or
    # "in_process" (the others keep their processes and the replacement receives its state
    # from an HSDP replica, training/recovery; needs parallel.dp_replicate >= 2).
    recovery: str = "restart"
    # In-process recovery's bounds, seconds: a collective blocked on a peer that has given up;
    # a rank silent this long (no heartbeat) while the others vote on a step is dead; the wait
    # for the replacement to join (its process start included).
    recovery_collective_s: float = 30.0
    recovery_silence_s: float = 20.0
    recovery_rendezvous_s: float = 300.0


@dataclass
class MetricsConfig:
    # Prometheus endpoint of the trainer (training/metrics_export.py), served by local rank 0
    # of each node on this TCP port; 0 = off. The job renderer sets it to the port the
    # platform's scraper reads (config/kubernetes.py).
    port: int = 0


@dataclass
class EvalConfig:
    # Held-out loss after each durable checkpoint, over this many global batches of
    # data.eval_path (or held-out synthetic samples); 0 = off.
    batches: int = 0


# tracking.mlflow_uri that turns tracking off, even where the platform runs a server.
TRACKING_OFF = "off"


@dataclass
class TrackingConfig:
    # MLflow tracking URI (a SageMaker managed MLflow tracking server's ARN, http(s)://...,
    # or file://...): rank 0 logs the config, metrics and checkpoint events there. "" = the
    # platform's server where the job's environment sets HPTRAIN_MLFLOW_TRACKING_URI, else
    # off; "off" = off.
    mlflow_uri: str = ""
    # MLflow experiment; "" = the job's run directory name.
    experiment: str = ""


@dataclass
class JobConfig:
    preset: str = "tiny"
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    training: TrainingConfig = field(default_factory=TrainingConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    fault: FaultConfig = field(default_factory=FaultConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)

    def _check_ranges(self) -> None:
        """Every numeric field finite and in range, before any arithmetic on them."""
        for section in (
            "model",
            "data",
            "training",
            "optim",
            "parallel",
            "checkpoint",
            "fault",
            "eval",
        ):
            for f in dataclasses.fields(getattr(self, section)):
                v = getattr(getattr(self, section), f.name)
                if isinstance(v, float) and not math.isfinite(v):
                    raise ConfigError(f"{section}.{f.name} must be a finite number, got {v}")
        for key, lo, lo_ok, hi, hi_ok in _RANGES:
            section, name = key.split(".")
            v = getattr(getattr(self, section), name)
            if v is None and key in _OPTIONAL:
                continue
            bad = v < lo if lo_ok else v <= lo
            if hi is not None:
                bad = bad or (v > hi if hi_ok else v >= hi)
            if bad:
                low = f"{'>=' if lo_ok else '>'} {lo}"
                high = f" and {'<=' if hi_ok else '<'} {hi}" if hi is not None else ""
                raise ConfigError(f"{key} must be {low}{high}, got {v}")
        p = self.parallel
        for name in ("dp_replicate", "dp_shard"):
            value = getattr(p, name)
            if value != -1 and value < 1:
                raise ConfigError(
                    f"parallel.{name} must be >= 1 or -1 (the rest of the world), got {value}"
                )
        if p.dp_replicate == -1 and p.dp_shard == -1:
            raise ConfigError(
                "parallel.dp_replicate and parallel.dp_shard are both -1; set one of them"
            )

    def validate(self) -> None:
        self._check_ranges()
        m, t = self.model, self.training
        if m.dim % m.n_heads:
            raise ConfigError("model.dim must be divisible by model.n_heads")
        kv = m.n_kv_heads or m.n_heads
        if m.n_heads % kv:
            raise ConfigError("model.n_heads must be divisible by model.n_kv_heads")
        if (m.dim // m.n_heads) % 2:
            raise ConfigError("head dim (model.dim / model.n_heads) must be even for RoPE")
        tp = self.parallel.tp
        if t.float8 and tp > 1:
            raise ConfigError(
                f"training.float8=true needs parallel.tp=1 (got {tp}): the tensor-parallel "
                "plan has no FP8 layouts; set parallel.tp=1 or training.float8=false"
            )
        if m.n_heads % tp or kv % tp:
            raise ConfigError(
                f"parallel.tp={tp} must divide model.n_heads={m.n_heads} and the key/value "
                f"heads ({kv}): tensor parallelism splits whole heads"
            )
        self._check_tensor_parallel_splits()
        if t.steps < 1 or t.global_batch_size < 1 or t.seq_len < 2:
            raise ConfigError("training.steps, global_batch_size must be >= 1 and seq_len >= 2")
        d = self.data
        if d.source not in DATA_SOURCES:
            raise ConfigError(f"data.source must be one of {', '.join(DATA_SOURCES)}")
        if d.source != "synthetic" and not d.path:
            raise ConfigError(f"data.path is required when data.source={d.source}")
        for key, value in (("data.path", d.path), ("data.eval_path", d.eval_path)):
            if d.source == "s3" and value and not value.startswith("s3://"):
                raise ConfigError(f"{key} must be s3://bucket/prefix when data.source=s3")
        if self.eval.batches and d.source != "synthetic" and not d.eval_path:
            raise ConfigError(
                f"eval.batches needs data.eval_path (held-out shards) when data.source={d.source}"
            )
        if self.data.dtype not in ("uint16", "uint32"):
            raise ConfigError("data.dtype must be uint16 or uint32")
        if self.parallel.mixed_precision not in ("auto", "bf16", "fp32"):
            raise ConfigError("parallel.mixed_precision must be auto, bf16 or fp32")
        self.parallel.activation_checkpoint = normalize_activation_checkpoint(
            self.parallel.activation_checkpoint
        )
        checkpointed_layers(self.parallel.activation_checkpoint, m.n_layers)
        self.checkpoint.validate()
        if self.fault.watchdog_s < 0 or self.fault.sigterm_grace_s <= 0:
            raise ConfigError("fault.watchdog_s must be >= 0 and fault.sigterm_grace_s > 0")
        if self.fault.recovery not in RECOVERY_MODES:
            raise ConfigError(f"fault.recovery must be one of {', '.join(RECOVERY_MODES)}")
        port = self.metrics.port
        if port != 0 and not METRICS_PORTS[0] <= port <= METRICS_PORTS[1]:
            raise ConfigError(
                f"metrics.port must be 0 (off) or {METRICS_PORTS[0]}-{METRICS_PORTS[1]}, got {port}"
            )

    def _check_tensor_parallel_splits(self) -> None:
        """What tensor parallelism splits over parallel.tp ranks divides evenly."""
        tp, m, t = self.parallel.tp, self.model, self.training
        if tp == 1:
            return
        hidden = ffn_hidden_dim(m)
        if hidden % tp:
            raise ConfigError(
                f"model.ffn_hidden (the MLP width, {hidden}) must be divisible by "
                f"parallel.tp={tp}: tensor parallelism splits the hidden units"
            )
        if m.vocab_size % tp:
            raise ConfigError(
                f"model.vocab_size={m.vocab_size} must be divisible by parallel.tp={tp}: "
                "the embedding and output are split over the vocabulary"
            )
        if t.seq_len % tp:
            raise ConfigError(
                f"training.seq_len={t.seq_len} must be divisible by parallel.tp={tp}: "
                "sequence parallelism splits each sequence between the norms"
            )

    def chunked_loss_tokens(self) -> int:
        """training.loss_chunk_tokens where it applies: without tensor parallelism. Under TP
        the loss is vocabulary-parallel, its logits already split over the tp ranks (8b's
        8192 tokens x 128256 in fp32 are 4.2 GB a copy, 0.5 GB a rank over 8), so the
        presets' chunked loss gives way to it."""
        return self.training.loss_chunk_tokens if self.parallel.tp == 1 else 0

    def check_world(self, world_size: int) -> None:
        """Checks that depend on the launch size, done once the world is known. The trainer
        runs the batch it is given: a batch the world does not split is refused, naming the
        one `batch_for_world` picks (what `hpctl job render` passes)."""
        self.check_sharding(world_size)
        self.check_recovery(world_size)
        batch = self.training.global_batch_size
        replicas = self.data_parallel_size(world_size)
        if batch % replicas:
            raise ConfigError(
                f"training.global_batch_size={batch} is not divisible by "
                f"{_ranks_reading(replicas, world_size)}; the nearest batch that splits is "
                f"training.global_batch_size={self.batch_for_world(world_size)}"
            )
        self.micro_batches(world_size)

    def mesh_shape(self, world_size: int) -> tuple[int, int, int]:
        """(dp_replicate, dp_shard, tp) for a world of `world_size` ranks, a -1 resolved to
        the rest of the world; refuses settings that do not multiply to the world."""
        p = self.parallel
        if world_size % p.tp:
            raise ConfigError(
                f"parallel.tp={p.tp} does not divide world size {world_size}; pick a tp that "
                "divides the ranks of a node"
            )
        data_parallel = world_size // p.tp
        replicate, shard = p.dp_replicate, p.dp_shard
        if shard == -1:
            shard = data_parallel // replicate
        elif replicate == -1:
            replicate = data_parallel // shard
        if replicate < 1 or shard < 1 or replicate * shard * p.tp != world_size:
            raise ConfigError(
                f"parallel.dp_replicate={p.dp_replicate} x dp_shard={p.dp_shard}"
                f"{f' x tp={p.tp}' if p.tp > 1 else ''} does not match world size {world_size}"
            )
        return replicate, shard, p.tp

    def check_recovery(self, world_size: int) -> None:
        """In-process recovery copies a lost shard from another replica of it: the mesh needs
        a replica dimension."""
        replicate = self.mesh_shape(world_size)[0]
        if self.fault.recovery == IN_PROCESS and replicate < 2:
            raise ConfigError(
                f"fault.recovery=in_process needs parallel.dp_replicate >= 2 (a replica of every "
                f"shard to recover from), got {replicate} on {world_size} ranks; set "
                "parallel.dp_replicate=2 or fault.recovery=restart"
            )

    def check_sharding(self, world_size: int) -> None:
        """The parallel settings split a world of `world_size` ranks (`mesh_shape`)."""
        self.mesh_shape(world_size)

    def data_parallel_size(self, world_size: int) -> int:
        """Ranks that read different samples: the world over the tensor-parallel degree (a
        tensor-parallel group reads one batch together)."""
        return world_size // self.parallel.tp

    def batch_for_world(self, world_size: int) -> int:
        """The global batch a world of `world_size` ranks runs for this config: the
        training.global_batch_size asked for when it splits, else the nearest that does.

        A batch splits when every rank gets a whole number of micro-batches: its share is a
        multiple of training.micro_batch_size, or at most one micro-batch (then run in one
        pass). Nearest, not always down or up: the learning-rate schedule counts steps and
        the preset's learning rate was chosen for its batch, so the closest batch keeps the
        tokens per step, and with them the tokens over warm-up and decay, closest to what the
        schedule was set for (round-down alone takes 512 to 480 on 48 ranks where 528 is
        nearer; 1b's 256 on 40 ranks goes up to 320 rather than down to 160). A tie goes up:
        a larger batch at the same learning rate is the stable side. Never 0: a world with
        more ranks than sequences runs one sequence per rank.
        """
        replicas = self.data_parallel_size(world_size)
        micro = self.training.micro_batch_size
        per_rank = Fraction(self.training.global_batch_size, replicas)
        # Shares above one micro-batch move in whole micro-batches (gradient accumulation
        # passes); below it, one sequence at a time.
        unit = micro if micro and per_rank >= micro else 1
        down = math.floor(per_rank / unit) * unit
        up = math.ceil(per_rank / unit) * unit
        share = up if down == 0 or up - per_rank <= per_rank - down else down
        return share * replicas

    def micro_batches(self, world_size: int) -> tuple[int, int]:
        """(sequences per pass, passes per step) on each rank of a world of `world_size`."""
        t = self.training
        replicas = self.data_parallel_size(world_size)
        per_rank = t.global_batch_size // replicas
        micro = min(t.micro_batch_size or per_rank, per_rank)
        if micro < 1 or per_rank % micro:
            raise ConfigError(
                f"training.micro_batch_size={t.micro_batch_size} does not divide the per-rank "
                f"batch {per_rank} (training.global_batch_size={t.global_batch_size} / "
                f"{_ranks_reading(replicas, world_size)}); the nearest batch that splits is "
                f"training.global_batch_size={self.batch_for_world(world_size)}"
            )
        return micro, per_rank // micro

    def tracking_uri(self, environ: typing.Mapping[str, str]) -> str:
        """The MLflow tracking URI in effect ("" = no tracking): tracking.mlflow_uri, or the
        platform's from `environ` when it is empty."""
        uri = self.tracking.mlflow_uri or environ.get(MLFLOW_TRACKING_URI_ENV, "")
        return "" if uri == TRACKING_OFF else uri

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _ranks_reading(replicas: int, world_size: int) -> str:
    """The ranks a global batch is split over, as an error message names them."""
    if replicas == world_size:
        return f"world size {world_size}"
    return (
        f"the {replicas} data-parallel ranks of world size {world_size} "
        f"(tensor-parallel groups of {world_size // replicas} read one batch)"
    )


_AC_HELP = "parallel.activation_checkpoint must be none, all, every:K or first:N"


def normalize_activation_checkpoint(value: str | bool) -> str:
    """The canonical spelling; the old boolean (true/false, 1/0, ...) reads as all/none."""
    if isinstance(value, bool):
        return "all" if value else "none"
    low = value.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return "all"
    if low in ("0", "false", "no", "off", ""):
        return "none"
    return low


def checkpointed_layers(spec: str, n_layers: int) -> list[int]:
    """Indices of the decoder layers that `parallel.activation_checkpoint` selects."""
    spec = normalize_activation_checkpoint(spec)
    if spec == "none":
        return []
    if spec == "all":
        return list(range(n_layers))
    kind, _, raw = spec.partition(":")
    if kind not in ("every", "first") or not raw.isdigit() or int(raw) < 1:
        raise ConfigError(f"{_AC_HELP} (K, N >= 1), got {spec!r}")
    k = int(raw)
    if kind == "every":
        return list(range(0, n_layers, k))
    if k > n_layers:
        raise ConfigError(f"{_AC_HELP}: first:{k} exceeds model.n_layers={n_layers}")
    return list(range(k))


def output_dirs(cfg: JobConfig, out: Path) -> dict[str, Path]:
    """Every directory a rank writes to, by the option that names it."""
    roots = checkpoint_roots(cfg.checkpoint, out)
    return {"--out": out, **{tier_key(name, "dir"): root for name, root in roots.items()}}


# fault.recovery values: a restart from a checkpoint tier, or in-process from a peer replica.
IN_PROCESS = "in_process"
RECOVERY_MODES = ("restart", IN_PROCESS)

# data.source values (training/data.py build_source).
DATA_SOURCES = ("synthetic", "memmap", "s3")

# Ports `metrics.port` may take besides 0: unprivileged (the image runs as a non-root user).
METRICS_PORTS = (1024, 65535)

# (field, lower bound, bound allowed, upper bound or None, bound allowed).
_RANGES: list[tuple[str, float, bool, float | None, bool]] = [
    ("model.dim", 0, False, None, False),
    ("model.n_layers", 0, False, None, False),
    ("model.n_heads", 0, False, None, False),
    ("model.n_kv_heads", 0, False, None, False),
    ("model.vocab_size", 1, False, None, False),
    ("model.ffn_hidden", 0, False, None, False),
    ("model.multiple_of", 0, False, None, False),
    ("model.norm_eps", 0, False, None, False),
    ("model.rope_theta", 0, False, None, False),
    ("model.init_std", 0, False, None, False),
    ("data.synthetic_samples", 0, False, None, False),
    ("data.seed", 0, True, None, False),
    ("data.prefetch_batches", 0, True, None, False),
    ("eval.batches", 0, True, None, False),
    ("training.steps", 0, False, None, False),
    ("training.global_batch_size", 0, False, None, False),
    ("training.seq_len", 2, True, None, False),
    ("training.seed", 0, True, None, False),
    ("training.grad_clip", 0, False, None, False),
    ("training.cpu_threads", 0, True, None, False),
    ("training.micro_batch_size", 0, True, None, False),
    ("training.loss_chunk_tokens", 0, True, None, False),
    ("optim.lr", 0, False, None, False),
    ("optim.min_lr_ratio", 0, True, 1, True),
    ("optim.warmup_steps", 0, True, None, False),
    ("optim.weight_decay", 0, True, None, False),
    ("optim.beta1", 0, True, 1, False),
    ("optim.beta2", 0, True, 1, False),
    ("optim.eps", 0, False, None, False),
    ("parallel.tp", 1, True, None, False),
    ("fault.watchdog_s", 0, True, None, False),
    ("fault.sigterm_grace_s", 0, False, None, False),
    ("fault.recovery_collective_s", 0, False, None, False),
    ("fault.recovery_silence_s", 0, False, None, False),
    ("fault.recovery_rendezvous_s", 0, False, None, False),
]
_OPTIONAL = {"model.n_kv_heads", "model.ffn_hidden"}


def apply_override(cfg: JobConfig, assignment: str) -> None:
    """Applies one ``section.field=value`` assignment in place."""
    if "=" not in assignment:
        raise ConfigError(f"override {assignment!r} must look like section.field=value")
    key, raw = assignment.split("=", 1)
    key = key.strip()
    parts = key.split(".")
    if len(parts) != 2:
        raise ConfigError(f"override key {key!r} must be section.field (e.g. training.steps)")
    section_name, field_name = parts
    job_hints = typing.get_type_hints(JobConfig)
    if section_name not in job_hints or not dataclasses.is_dataclass(job_hints[section_name]):
        raise ConfigError(f"unknown config section {section_name!r}")
    section = getattr(cfg, section_name)
    hints = typing.get_type_hints(type(section))
    if field_name not in hints:
        if isinstance(section, CheckpointConfig) and section.set_tier_field(field_name, raw):
            return
        raise ConfigError(f"unknown config key {key!r}")
    setattr(section, field_name, parse_value(raw, hints[field_name], key))
