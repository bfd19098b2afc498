"""Structured configs: one dataclass per Hydra group, registered in Hydra's ConfigStore.

Hydra composes `conf/` on top of these schemas, so a typo in a key or a value of the wrong
type fails at composition time. Registration lives in `load.py`; rules that involve several
groups live in `validate.py`.
This module must stay importable without JAX: `python -m rlexp --cfg job` only touches it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from rlexp.perf import PATCHES as PERF_PATCHES


@dataclass
class ModelConfig:
    """A decoder checkpoint in Hugging Face layout and the architecture it must have."""

    name: str = MISSING
    family: str = "qwen3"  # tunix model family: qwen3, llama3, gemma4, gpt_oss
    hf_id: str | None = None  # hub id, downloaded with huggingface_hub when `path` is unset
    path: str | None = None  # local folder or gs:// path; "builtin:<name>" = shipped in rlexp
    instruction_tuned: bool = False  # explicit, never inferred from the hub id
    num_layers: int = MISSING
    vocab_size: int = MISSING
    embed_dim: int = MISSING
    hidden_dim: int = MISSING
    num_heads: int = MISSING
    num_kv_heads: int = MISSING
    head_dim: int = MISSING
    max_context: int = MISSING  # tokens of prompt + completion the model supports
    dtype: str = "float32"  # compute dtype
    param_dtype: str = "float32"
    remat: str = "none"  # none | full
    extra: dict[str, Any] = field(default_factory=dict)  # family-specific architecture fields


@dataclass
class DatasetConfig:
    """Where prompts and ground-truth answers come from; every row becomes {id, prompt, answer, data_source}."""

    name: str = MISSING
    loader: str = MISSING  # registry key of the loader: arith, jsonl, parquet, gsm8k, ...
    source: str | None = None  # local path, gs:// path or hub id; None for synthetic sets
    train_size: int = 4096  # rows of the train split (synthetic sets: generated; others: cap, -1 = all)
    eval_size: int = 256
    seed: int = 1234  # split / generation seed, independent of the training seed
    # rlexp: random.Random(seed) split and order; maxtext: MaxText's (datasets' train_test_split, grain's
    # shuffle, caps before the length filter), file and hub datasets only (docs/eval.md)
    shuffle: str = "rlexp"
    params: dict[str, Any] = field(default_factory=dict)  # dataset-specific knobs
    # file and hub datasets (rlexp/data/files.py)
    subset: str | None = None  # hub config name (GSM8K: main)
    split: str = "train"  # train split: file-name prefix in a folder, or hub split
    eval_split: str | None = None  # null: hold out eval_fraction of the train split
    eval_source: str | None = None  # a separate file/folder for eval rows (default: source)
    eval_fraction: float = 0.05
    format: str = "auto"  # auto (by suffix) | jsonl | json | parquet
    prompt_field: str = "question"  # dotted path; a chat message list uses its last user turn
    answer_field: str = "answer"
    id_field: str | None = None  # null: "<name>-<split>-<row index>"
    data_source: str | None = None  # label copied into every row; null: dataset name


@dataclass
class MeshConfig:
    fsdp: int = -1  # -1: all devices of the role not used by tp
    tp: int = 1


@dataclass
class SliceConfig:
    """The hardware a run uses: local CPU/GPU, or a TPU slice launched elsewhere."""

    name: str = MISSING
    kind: str = "cpu"  # cpu | gpu | tpu
    devices: int = 1  # JAX devices the run sees (cpu: fake host devices)
    mesh: MeshConfig = field(default_factory=MeshConfig)
    rollout_devices: int = 0  # 0: rollout colocated with the trainer; >0: last N devices sample
    hbm_gib_per_device: float = 0.0  # 0: unknown / host memory
    # TPU slices (conf/slice/v*.yaml): set name + topology; the rest is derived by rlexp/config/hardware.py
    topology: str | None = None  # e.g. 4x8, 2x4x4
    num_slices: int = 1  # identical slices joined over DCN (Pathways)
    chips: int = 0  # chips per slice (0: not a TPU)
    chips_per_vm: int = 0
    vms: int = 0  # TPU VMs (GKE nodes) per slice
    accelerator: str | None = None  # GKE label cloud.google.com/gke-tpu-accelerator
    machine_type: str | None = None
    instance_type: str | None = None  # Pathways resource manager --instance_type
    # GPU slices: hosts and GPUs per host (Slurm: one JAX process per node)
    nodes: int = 1
    gpus_per_node: int = 0
    gpu_type: str | None = None
    processes_per_node: int = 1  # JAX processes per node, each with devices / (nodes x this) devices


@dataclass
class RewardFnConfig:
    fn: str = MISSING  # registry key of the reward function
    name: str | None = None  # metric name; defaults to fn
    weight: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)
    range: list[float] = field(default_factory=lambda: [-1.0, 1.0])  # values outside fail the preflight


@dataclass
class RewardConfig:
    """The reward functions scoring each completion, and how they combine."""

    name: str = MISSING
    functions: list[RewardFnConfig] = field(default_factory=list)
    combine: str = "sum"  # sum | weighted_mean (alias weighted_mean_clipped)
    max_error_ratio: float = 0.8  # stop training when more of a step's reward calls error
    correct_threshold: float = 1.0  # eval: a completion is correct when the first function scores >= this


@dataclass
class DataTemplateConfig:
    """How a data row's question becomes the user message: model-independent text."""

    name: str = MISSING
    system_prompt: str = ""
    template: str = "{question}"  # layout of {system_prompt} and {question}


@dataclass
class ChatTemplateConfig:
    """How the user message becomes the model's prompt text: the model's turn markers around it."""

    name: str = MISSING
    chat: str | None = None  # jinja chat template; None = use the text as is; "tokenizer" = the tokenizer's own
    bos_token: str = ""  # what {{ bos_token }} renders to when no tokenizer is at hand
    turn_markers: list[str] = field(default_factory=list)  # must not appear doubled in a rendered prompt


@dataclass
class LoraConfig:
    rank: int = 0  # 0 = full fine-tuning
    alpha: float = 16.0
    module_path: str = ".*(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj).*"


@dataclass
class RolloutConfig:
    """Which engine samples the completions, how it is split over the rollout devices, and whether it runs ahead.

    The parallelism and memory knobs are vLLM's (the seeds: gemma4-e4b DP8 x TP2 at HBM 0.5, gpt-oss-20b DP2 x TP8
    at HBM 0.8); the vanilla engine samples on the rollout mesh of slice.mesh / slice.rollout_devices.
    """

    engine: str = "vanilla"  # vanilla (Tunix's JAX sampler) | vllm (vLLM on TPU slices, package vllm-tpu)
    data_parallel: int = -1  # vllm: engine replicas over the rollout devices; -1: rollout devices / tensor_parallel
    tensor_parallel: int = -1  # vllm: chips per replica; -1: rollout devices / data_parallel
    hbm_utilization: float = 0.2  # vllm: share of each rollout chip's HBM for weights + KV cache (Tunix's default)
    # Sample the next micro-batch (trainer.micro_batch_size) while the trainer trains on the last one; weights still
    # sync once per step, so training stays on-policy. Needs rollout devices apart from the trainer's
    # (slice.rollout_devices > 0). False keeps separate devices in turn: sample the whole batch, then train.
    async_rollout: bool = False
    # vLLM engine knobs (Tunix's RolloutConfig.rollout_vllm_*); MaxText's names in brackets
    expert_parallel: int = 1  # [rollout_expert_parallelism] data_parallel x tensor_parallel x this = rollout devices
    async_scheduling: bool = False  # [async_scheduling] vLLM schedules the next step while this one runs
    enable_dp_attention: bool = False  # [enable_dp_attention] attention replicated over DP ("attn_dp" axis)
    max_num_seqs: int | None = None  # [max_num_seqs] sequences vLLM decodes at once; null: vLLM's default
    max_num_batched_tokens: int | None = None  # [max_num_batched_tokens] tokens per engine step; null: vLLM's
    reshard_chunk_size: int | None = None  # [rl.reshard_chunk_size] weights resharded per sync call; null: all
    # tokens of KV cache beyond prompt + completion [kv_cache_buffer]; vLLM's max_model_len = the sum
    kv_cache_buffer: int = 8
    # the rollout copy's weights in this dtype (float32 | bfloat16 | float16); null: the trainer's (model.param_dtype).
    # The vanilla engine on rollout devices of its own (slice.rollout_devices > 0): colocated, the two share weights
    dtype: str | None = None
    # process environment of the run where the engine runs (the JobSet's rlexp container; set before vLLM starts)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class EvalSampling:
    """One eval sampling strategy (MaxText's `generation_configs` entry)."""

    temperature: float = 0.01
    top_k: int | None = 1
    top_p: float = 1.0


@dataclass
class EvalStrategies:
    """MaxText 0.2.5 rl.yml's eval strategies, by name (trainer.eval_strategy picks one)."""

    greedy: EvalSampling = field(default_factory=EvalSampling)
    standard: EvalSampling = field(default_factory=lambda: EvalSampling(0.7, 50, 0.95))
    liberal: EvalSampling = field(default_factory=lambda: EvalSampling(0.85, 2000, 1.0))


@dataclass
class DynamicSamplingConfig:
    """DAPO's dynamic sampling (Yu et al. 2025, eq. 11): drop prompt groups whose rewards are all equal (their
    advantages are zero, so they teach nothing) and refill the batch with groups sampled from more prompts."""

    enabled: bool = False  # trainer=dapo turns it on, as the paper's recipe
    max_rounds: int = 3  # extra sampling rounds per batch at most; a batch still short keeps some dropped groups


@dataclass
class OverlongConfig:
    """DAPO's soft overlong punishment (Yu et al. 2025, eq. 13), in tokens of the completion: 0 up to
    max_completion_tokens - buffer_tokens, then falling linearly to -penalty at max_completion_tokens."""

    enabled: bool = False  # trainer=dapo turns it on, as the paper's recipe
    buffer_tokens: int | None = None  # L_cache; null: a fifth of trainer.max_completion_tokens (the paper's 4096/20480)
    penalty: float = 1.0  # the shaping term's value at the budget's end is -penalty


@dataclass
class DapoConfig:
    """DAPO's own keys (Yu et al. 2025; trainer=dapo, rlexp.algorithms.dapo): clip-higher, dynamic sampling and the
    overlong shaping. Another algorithm refuses them set (rlexp.algorithms.registry)."""

    epsilon_high: float | None = None  # clip-higher: the ratio's upper clip; null: trainer.epsilon
    dynamic_sampling: DynamicSamplingConfig = field(default_factory=DynamicSamplingConfig)
    overlong: OverlongConfig = field(default_factory=OverlongConfig)


@dataclass
class PpoConfig:
    """PPO (Schulman et al. 2017) through Tunix's learner: a critic, GAE over the completion's tokens, value
    clipping. The reward is given at the completion's last token; beta > 0 subtracts a KL penalty per token."""

    critic: str | None = None  # the critic's checkpoint (same architecture as model); null: the actor's checkpoint
    critic_learning_rate: float | None = None  # null: trainer.learning_rate (same schedule)
    gamma: float = 1.0  # GAE discount
    gae_lambda: float = 0.95
    clip_range_value: float = 0.2  # the new value stays within this of the old one in the value loss
    entropy_coef: float = 0.0  # > 0 adds an entropy bonus to the policy loss


@dataclass
class CorrectionConfig:
    """Rollout-trainer mismatch correction (rlexp.algorithms.correction, docs/algorithms.md): the sampler's
    per-token log-probabilities are the behaviour policy of an importance weight on each token's loss."""

    # none | tis_token | tis_sequence (truncated IS, min(ratio, cap)) | mis_token | mis_sequence (masked IS: drop
    # tokens or sequences whose ratio is outside [1/cap, cap]); ratio = pi_trainer / pi_sampler on sampled tokens
    mode: str = "none"
    cap: float = 2.0  # C: > 1


@dataclass
class OffPolicyConfig:
    """Bounded staleness (rlexp.algorithms.off_policy, docs/algorithms.md): rollouts sampled ahead of the updates
    that train on them, so the rollout engine and the trainer stop waiting for each other."""

    # k: the rollout of step t samples with the weights of step max(0, t - 1 - k), a queue of up to k batches ahead.
    # 0: every step samples with the weights it trains from (on-policy, as before)
    max_staleness: int = 0


@dataclass
class OpdConfig:
    """On-policy distillation (Agarwal et al. 2024; the Qwen3 report): the student samples, a frozen teacher's
    per-token log-probabilities on those samples give each token's advantage, log pi_teacher - log pi_student
    (the negated per-token reverse KL). rlexp.algorithms.opd."""

    # a run dir of `python -m rlexp` (its newest actor checkpoint), one `<run dir>/checkpoints/actor/<step>`, or a
    # Hugging Face folder (config.json + safetensors); its tokenizer must be the student's
    teacher: str | None = None


@dataclass
class TrainerConfig:
    """The RL algorithm, optimizer, rollout sampling, evaluation and checkpoint cadence."""

    algorithm: str = MISSING  # a registered algorithm (rlexp.algorithms): grpo | dapo | drgrpo | gspo | ppo | opd
    max_steps: int = 300  # GRPO steps (one rollout batch and one optimizer update each)
    epochs: int = 1  # passes over the train split available to max_steps
    batch_size: int = 8  # prompts per step
    num_generations: int = 8  # completions per prompt (group size G; PPO: 1)
    num_iterations: int = 1
    micro_batch_size: int | None = None  # prompts per forward/backward pass (gradient accumulation); null = batch
    rollout_micro_batch_size: int | None = None  # prompts per sampling call; null = micro_batch_size, else batch
    # optimizer: AdamW with linear warmup then cosine decay
    learning_rate: float = 1e-3
    warmup_ratio: float = 0.1
    lr_schedule: str = "cosine"  # cosine | constant
    final_lr_ratio: float = 0.0
    adam_b1: float = 0.9
    adam_b2: float = 0.99
    weight_decay: float = 0.0
    grad_clip: float = 1.0  # global-norm clipping; 0 disables
    # loss
    beta: float | None = 0.04  # KL coefficient; 0 skips the reference model; DAPO has none (null, refused if set)
    # the per-token KL estimator of the loss (PPO: of the reward's KL penalty) and of the logged `kl`:
    # k3 (alias low_var_kl) = r - 1 - log r with r = pi_ref / pi, >= 0 | kl = log pi - log pi_ref | mse = half its square
    kl_estimator: str = "k3"
    epsilon: float = 0.2
    loss_agg_mode: str = "sequence-mean-token-mean"
    # each algorithm's own keys, in its node (rlexp.algorithms: its spec names the node); refused under another
    dapo: DapoConfig = field(default_factory=DapoConfig)  # trainer=dapo only
    ppo: PpoConfig = field(default_factory=PpoConfig)  # trainer=ppo only
    opd: OpdConfig = field(default_factory=OpdConfig)  # trainer=opd only
    correction: CorrectionConfig = field(default_factory=CorrectionConfig)  # the sampler's mismatch, any GRPO kind
    off_policy: OffPolicyConfig = field(default_factory=OffPolicyConfig)  # rollouts sampled ahead (bounded staleness)
    # rollout
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int | None = None
    max_prompt_tokens: int = 16
    # fits the embedded default's answers (a sum up to 58: two digits and EOS); real tasks set their own (experiment/)
    max_completion_tokens: int = 4
    # evaluation (docs/eval.md): eval_passes completions per prompt with eval_strategy's sampling (MaxText's
    # accuracy, partial and format accuracy, mean reward), and eval_samples at temperature 1 (pass@k, maj@k)
    eval_every: int = 100
    eval_prompts: int = 128
    eval_samples: int = 4  # samples per prompt for pass@1 / pass@k / maj@k at temperature 1
    eval_strategy: str = "greedy"  # greedy | standard | liberal (trainer.eval_strategies)
    eval_strategies: EvalStrategies = field(default_factory=EvalStrategies)
    eval_temperature: float | None = None  # null: the strategy's; set: overrides it
    eval_top_p: float | None = None
    eval_top_k: int | None = None
    eval_passes: int = 1  # MaxText's num_eval_passes
    eval_mode: str = "pass"  # pass (any of the passes) | maj (majority answer) | pass_at_1 (fraction)
    # pass@k and maj@k for: null, each power of two up to eval_samples; an integer k, 1 and k; a list, 1 and each
    # of its k (Any: OmegaConf types no int-or-list; rlexp.config.values checks the value, naming the key)
    eval_k: Any = None
    samples_every: int = 50  # write prompt/completion rows to samples.jsonl
    # checkpoints
    checkpoint_every: int = 100
    keep_checkpoints: int = 2
    resume: str = "auto"  # auto | never
    lora: LoraConfig = field(default_factory=LoraConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)

    def rollout_prompts(self) -> int:
        """Prompts per sampling call, as Tunix's learner sizes them: rollout_micro_batch_size, else
        micro_batch_size, else the batch."""
        return self.rollout_micro_batch_size or self.micro_batch_size or self.batch_size


@dataclass
class ToolConfig:
    name: str = MISSING  # registry key of the tool (rlexp.tools.register): calculator, add, python, http, ...
    kwargs: dict[str, Any] = field(default_factory=dict)  # the tool's own settings (http: url, token_env)


@dataclass
class AgentConfig:
    """How a rollout interacts: one completion (single_turn), or episodes of model turns and tool calls (tools).

    An episode's tokens after the prompt (model turns and tool outputs) fit trainer.max_completion_tokens; tool
    outputs are masked out of the loss (rlexp.tools, rlexp.train.episodes).
    """

    name: str = "single_turn"
    kind: str = "single_turn"  # single_turn | tools
    max_turns: int = 1  # model turns per episode
    tools: list[ToolConfig] = field(default_factory=list)
    tool_format: str = "auto"  # auto (from chat_template) | qwen | gemma | harmony
    max_turn_tokens: int | None = None  # tokens one model turn may generate; null: trainer.max_completion_tokens
    max_tool_tokens: int = 32  # a tool's output is cut to this many tokens
    tool_timeout_s: float = 5.0  # a tool call taking longer is an error message to the model
    # a training step whose calls of one tool fail more than this share stops the run (1.0: when all of them fail)
    tool_error_budget: float = 1.0
    answer_pattern: str | None = None  # a turn matching this regex ends the episode, tool calls or not
    describe_tools: bool = True  # the prompt's system message offers the tools' schemas in tool_format's convention


@dataclass
class AdaptiveConfig:
    """Task weights that move toward the tasks whose groups are still learnable (rlexp/envs/adaptive.py)."""

    enabled: bool = False  # off: each task's share of the rows is its configured weight, as drawn
    rate: float = 0.2  # each step, a task's learnable share moves this far toward the share its groups just had
    floor: float = 0.05  # the least weight a task keeps (a task solved now is still looked at); tasks x floor < 1


@dataclass
class OpenEnvServerConfig:
    """env=openenv's keys of one server: `env.*` for a run's only server, `env.tasks.<name>.*` for each of several
    (rlexp/envs/openenv_server.py builds its per-task view from these fields, so a key is declared here once)."""

    # one of url (running), command (rlexp starts it; {port}: a free loopback port) or image (docker run)
    url: str | None = None
    command: str | None = None
    image: str | None = None
    # the TaskProvider split of the train rows and of the eval rows (null: the server's first test or validation
    # split, else `split`); the action field a model turn fills and the observation field the model reads (null:
    # the only text field of each)
    split: str = "train"
    eval_split: str | None = None
    action_key: str | None = None
    observation_key: str | None = None


@dataclass
class EnvConfig(OpenEnvServerConfig):
    """An environment: a run's rows, scorer, turns and tools in one choice (rlexp/envs, docs/envs.md). `none` keeps
    the dataset, reward and agent groups; any other kind supplies the rows and the scorer in their place."""

    name: str = "none"
    kind: str = "none"  # none | reasoning_gym | class | openenv
    # reasoning_gym: {dataset name: {weight: w, config: {the dataset's own config keys}}}
    # openenv, several servers: {task name: {weight: w, url | command | image, split, ...}}
    tasks: dict[str, Any] = field(default_factory=dict)
    seed: int = 1234  # rows: train from seed, eval from seed + 1 (disjoint draws)
    train_size: int = 2048  # rows over all tasks, split by weight
    eval_size: int = 64
    system_prompt: str | None = None  # null: the kind's own (reasoning_gym: answer between <answer> tags)
    # class: a user's class in TRL's environment_factory shape, `module:Class` or `path/to/file.py:Class`
    target: str | None = None
    # class: each child process running the class (reset, tool calls, get_reward); openenv: each request
    timeout_s: float = 30.0
    start_timeout_s: float = 60.0  # a server rlexp starts (or reaches) answers /health within this
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)  # weights toward learnable tasks


@dataclass
class LoggerConfig:
    """Experiment tracking backend; metrics.jsonl and summary.json are always written."""

    name: str = "none"  # none | wandb | tensorboard
    project: str = "rlexp"
    entity: str | None = None
    mode: str = "auto"  # auto (offline unless WANDB_API_KEY), online, offline
    tags: list[str] = field(default_factory=list)
    group: str | None = None  # null: the sweep's group (sweep.json "group"); a single run has none
    job_type: str | None = None  # null: "<trainer.algorithm>-train"
    dir: str | None = None  # local folder for the backend's files; null: the run dir


@dataclass
class SweepConfig:
    """Multirun bookkeeping: sweep.json manifest, resume, progress table and the end-of-sweep report."""

    name: str | None = None  # sweep name (presets set it); null: run_name. wandb group = <name>-<sweep dir name>
    resume: bool = False  # re-run only the jobs of this sweep dir (hydra.sweep.dir=...) not completed yet
    dir: str | None = None  # sweep root for sweep.json (may be gs://); null: hydra.sweep.dir
    direction: str = "maximize"  # how the objective ranks runs in reports: maximize | minimize
    report: bool = True  # write <sweep dir>/report.html when the multirun ends
    progress: bool = True  # print the sweep table as jobs start and end


@dataclass
class CompileCacheConfig:
    enabled: bool = True
    dir: str = "~/.cache/rlexp/jax"


@dataclass
class ValidateConfig:
    """The preflight (`python -m rlexp.validate`): score a few rows with every reward before a launch."""

    rows: int = 8  # dataset rows to render and score
    completions: str | None = None  # jsonl of {id, completion}: score these, no model needed
    generations: int = 2  # completions sampled per row (groups for the zero-variance share)
    max_new_tokens: int | None = None  # null: trainer.max_completion_tokens
    skip: bool = False  # launchers submit without the preflight (explicit opt-out)


@dataclass
class CostConfig:
    """Chip-hours and cost per run (rlexp/estimates/cost.py): printed by validate and launches, kept in summary.json."""

    price_per_chip_hour: float | None = None  # USD; null: the accelerator's public on-demand list price
    step_time_s: float | None = None  # seconds per step; null: calibration, measured table, roofline estimate
    calibration: str | None = None  # run dir of a short run of this config: its median perf/step_time_sec
    completion_fill: float = 1.0  # share of max_completion_tokens a completion uses in the roofline estimate


@dataclass
class ProfileConfig:
    """A JAX profiler trace (xplane) of a few training steps, for XProf or TensorBoard's profile tab.

    Tunix's trainer takes it (its ProfilerOptions), on process 0 only. MaxText's `profiler=xplane profiler_steps=N
    skip_first_n_steps_for_profiler=K` is `profile.steps=N profile.skip_steps=K`.
    """

    steps: int = 0  # optimizer steps to trace, each with the rollout before it; 0: no trace
    # steps trained before the trace starts, counted from where the run starts or resumes (its first step compiles)
    skip_steps: int = 1
    dir: str | None = None  # where the trace goes (local path or gs://); null: <run dir>/profile


@dataclass
class PerfConfig:
    """rlexp's speed work on Tunix's code paths (`rlexp.perf`), applied once in a run's JAX set-up.

    Each patch is guarded by the fingerprint of the library source it replaces. `perf.patches=[]` runs Tunix's
    own code, its `Sampler` included (the `lean_sampler` patch samples otherwise, in runs and `rlexp eval`);
    summary.json records what a run applied and the classes that ran (`perf.classes`). Tunix's correctness fixes are always on (`rlexp.fixes`).
    """

    patches: list[str] = field(default_factory=lambda: list(PERF_PATCHES))


@dataclass
class RlexpConfig:
    model: ModelConfig = MISSING
    dataset: DatasetConfig = MISSING
    slice: SliceConfig = MISSING
    reward: RewardConfig = MISSING
    chat_template: ChatTemplateConfig = MISSING
    data_template: DataTemplateConfig = MISSING
    trainer: TrainerConfig = MISSING
    agent: AgentConfig = field(default_factory=AgentConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    seed: int = 0
    run_name: str = "rlexp"
    objective: str = "eval.after.pass_at_1"  # summary.json key returned to Hydra sweepers
    output_dir: str | None = None  # where run files go (local path or gs://); null = Hydra's run dir
    sweep: SweepConfig = field(default_factory=SweepConfig)
    compile_cache: CompileCacheConfig = field(default_factory=CompileCacheConfig)
    validate: ValidateConfig = field(default_factory=ValidateConfig)
    cost: CostConfig = field(default_factory=CostConfig)
    profile: ProfileConfig = field(default_factory=ProfileConfig)
    perf: PerfConfig = field(default_factory=PerfConfig)


GROUP_SCHEMAS: dict[str, type] = {
    "model": ModelConfig,
    "dataset": DatasetConfig,
    "slice": SliceConfig,
    "reward": RewardConfig,
    "chat_template": ChatTemplateConfig,
    "data_template": DataTemplateConfig,
    "trainer": TrainerConfig,
    "agent": AgentConfig,
    "logger": LoggerConfig,
    "env": EnvConfig,
}
