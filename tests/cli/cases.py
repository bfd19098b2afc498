"""The bad inputs: one row per command a user might type, with the exit status and the words its one-line
error must hold (the key or argument the user set). Placeholders: {tmp} a fresh folder per case, {run} the
shared trained run dir (its files must not change), {train} the overrides it was trained with, {damaged} a
copy with a damaged checkpoint, {files} broken files, {models} damaged model folders, {busy} a port in use,
{closed} a port nothing listens on, {fixture_runs} the committed sweep fixture."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from tests.helpers import REPO


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # after `python -m` (or a script path under scripts/)
    code: int  # 2: usage error, 1: failure at run time
    says: str  # the error line holds this: the key or argument that was wrong
    run_dir: bool = False  # hash {run} before and after: a refused command leaves it as it was
    check: str | None = None  # an extra assertion of the test module, by name
    env: tuple[tuple[str, str], ...] = ()  # environment variables the command runs with (RLEXP_IMAGE=...)
    fix: str | None = None  # the error line holds this too: the fix it names


def _c(cmd: str, code: int, says: str, **kw: object) -> Case:
    return Case(tuple(cmd.split(" ")), code, says, **kw)  # type: ignore[arg-type]


RUN = "hydra.run.dir={tmp}/run"
SECRET = "sk-PLANTEDbadinput-0123456789"  # a key given on the command line: in no output, no file (check no_secret)  # Hydra apps write nothing into the repository
TPU = "slice=v6e-32 hydra.launcher.dry_run=true"

RLEXP = [
    # the examples, then every other mistake the config layer can catch before JAX
    _c(f"rlexp model=qwen3_06b {RUN}", 2, "did you mean qwen3_0_6b"),
    _c(f"rlexp experiment=nosuch {RUN}", 2, "experiment='nosuch'"),
    _c(f"rlexp trainer.learning_rate=1e-3,,3e-3 {RUN}", 2, "trainer.learning_rate=1e-3,,3e-3: not a valid override"),
    _c(f"rlexp trainer.learning_rate=range(1, {RUN}", 2, "trainer.learning_rate=range(1,"),
    _c(f"rlexp run_name=${{nosuch.key}} {RUN}", 2, "run_name=${nosuch.key}"),
    _c(f"rlexp trainer.max_steps=${{trainer.nothere}} {RUN}", 2, "trainer.max_steps="),
    _c(f"rlexp trainer.beta {RUN}", 2, "trainer.beta: not a valid override"),
    _c(f"rlexp trainer.learning_rate=abc {RUN}", 2, "trainer.learning_rate='abc'"),
    _c(f"rlexp trainer.max_steps=1.5 {RUN}", 2, "trainer.max_steps"),
    _c(f"rlexp compile_cache.enabled=maybe {RUN}", 2, "compile_cache.enabled"),
    _c(f"rlexp trainer.learning_rat=1e-3 {RUN}", 2, "did you mean trainer.learning_rate"),
    _c(f"rlexp +trainer.learning_rat=1e-3 {RUN}", 2, "trainer.learning_rat=0.001: no such key"),
    _c(f"rlexp ++trainer.learning_rat=1e-3 {RUN}", 2, "did you mean trainer.learning_rate"),
    _c(f"rlexp +foo=1 {RUN}", 2, "foo=1: no such key"),
    _c("rlexp --cfg job +foo=1", 2, "foo=1: no such key"),  # it prints only keys and types a run accepts
    _c(f"rlexp +model.num_layer=2 {RUN}", 2, "did you mean model.num_layers"),
    _c(f"rlexp trainer.lr=1e-3 {RUN}", 2, "did you mean trainer.learning_rate"),
    _c(f"rlexp dataset.path=x {RUN}", 2, "did you mean dataset.source"),
    _c(f"rlexp ~trainer.beta {RUN}", 2, "~trainer.beta"),
    _c(f"rlexp ~trainer.nothere {RUN}", 2, "trainer.nothere"),
    _c(f"rlexp +trainer.beta=0.1 {RUN}", 2, "trainer.beta=0.1: the key exists already"),
    _c(f"rlexp model.num_layers=??? {RUN}", 2, "model.num_layers"),
    # refused before Hydra composes (rlexp.config.overrides), in rlexp's words
    _c(f"rlexp trainer.beta=0,0.04 {RUN}", 2, "trainer.beta=0,0.04: a sweep, one job per value; add -m"),
    _c(f"rlexp sweep=lr_beta {RUN}", 2, "sweep='lr_beta': sweep is not in the defaults list; add it with +sweep"),
    _c(f"rlexp model=null {RUN}", 2, "model=None: a group takes one option's name"),
    _c(f"rlexp trainer.beta.x=1 {RUN}", 2, "trainer.beta.x='1': trainer.beta holds one value, not keys"),
    _c(f"rlexp trainer.eval_k=[1,x] {RUN}", 2, "trainer.eval_k='[1,x]': 'x' is not an integer; give null"),
    _c(f"rlexp model.extra.x=1 {RUN}", 2, "model.extra.x='1': not in this config yet; add it with +model.extra.x=1"),
    _c(f"rlexp trainer.adam_b1=1.5 {RUN}", 2, "trainer.adam_b1=1.5"),
    _c(f"rlexp trainer.adam_b1=1.0 {RUN}", 2, "trainer.adam_b1=1.0"),
    _c(f"rlexp trainer.adam_b2=-0.1 {RUN}", 2, "trainer.adam_b2=-0.1"),
    _c(
        f"rlexp trainer=dapo trainer.dapo.epsilon_high=nan {RUN}",
        2,
        "trainer.dapo.epsilon_high=nan: use a finite number",
    ),
    _c(
        f"rlexp trainer=dapo trainer.epsilon_high=0.3 {RUN}",
        2,
        "trainer.epsilon_high='0.3': moved: use trainer.dapo.epsilon_high",
    ),
    _c(f"rlexp trainer=dapo trainer.beta=0.04 {RUN}", 2, "trainer.beta=0.04: dapo has no KL term"),
    _c(
        f"rlexp trainer=dapo trainer.dapo.overlong.buffer_tokens=9 {RUN}",
        2,
        "trainer.dapo.overlong.buffer_tokens=9: use 1..trainer",
    ),
    _c(f"rlexp trainer.learning_rate=inf {RUN}", 2, "trainer.learning_rate=inf"),
    _c(f"rlexp +model.extra.scale=-inf {RUN}", 2, "model.extra.scale=-inf"),
    _c(f"rlexp trainer.temperature=0 {RUN}", 2, "trainer.temperature=0"),
    _c(f"rlexp trainer.top_p=1.5 {RUN}", 2, "trainer.top_p=1.5"),
    _c(f"rlexp trainer.num_generations=1 {RUN}", 2, "trainer.num_generations=1"),
    _c(f"rlexp trainer.warmup_ratio=1 {RUN}", 2, "trainer.warmup_ratio"),
    _c(f"rlexp trainer.eval_every=10 trainer.checkpoint_every=15 {RUN}", 2, "trainer.checkpoint_every=15"),
    _c(f"rlexp trainer.batch_size=0 {RUN}", 2, "trainer.batch_size=0"),
    _c(f"rlexp trainer.micro_batch_size=3 {RUN}", 2, "trainer.micro_batch_size=3"),
    _c(f"rlexp trainer.max_prompt_tokens=4000 {RUN}", 2, "trainer.max_completion_tokens"),
    _c(f"rlexp trainer.max_steps=100000 {RUN}", 2, "trainer.max_steps=100000"),
    _c(f"rlexp trainer.resume=sometimes {RUN}", 2, "trainer.resume='sometimes'"),
    _c(f"rlexp trainer.algorithm=reinforce {RUN}", 2, "trainer.algorithm='reinforce'"),
    _c(f"rlexp trainer.algorithm=ppo {RUN}", 2, "trainer.num_generations=8: PPO samples one completion per prompt"),
    _c(f"rlexp trainer.lora.rank=-1 {RUN}", 2, "trainer.lora.rank=-1"),
    _c(f"rlexp trainer.lora.rank=4 trainer.lora.alpha=0 {RUN}", 2, "trainer.lora.alpha"),
    _c(f"rlexp logger.mode=onlin {RUN}", 2, "logger.mode='onlin'"),
    _c(f"rlexp sweep.direction=up {RUN}", 2, "sweep.direction='up'"),
    _c(f"rlexp dataset.eval_fraction=1.5 {RUN}", 2, "dataset.eval_fraction=1.5"),
    _c(f"rlexp dataset.format=csv {RUN}", 2, "dataset.format='csv'"),
    _c(f"rlexp dataset.train_size=0 {RUN}", 2, "dataset.train_size=0"),
    _c(f"rlexp dataset=jsonl {RUN}", 2, "dataset.source"),
    _c(f"rlexp model.dtype=float8 {RUN}", 2, "model.dtype='float8'"),
    _c(f"rlexp slice.mesh.tp=0 {RUN}", 2, "slice.mesh.tp=0"),
    _c(f"rlexp slice.rollout_devices=5 {RUN}", 2, "slice.rollout_devices=5"),
    # the rollout-trainer mismatch correction (rlexp.algorithms.correction) and the rollout's own dtype
    _c(f"rlexp trainer.correction.mode=tis {RUN}", 2, "trainer.correction.mode='tis': use one of none, tis_token"),
    _c(f"rlexp trainer.correction.mode=tis_token trainer.correction.cap=1 {RUN}", 2, "trainer.correction.cap=1.0"),
    _c(
        f"rlexp trainer=ppo trainer.correction.mode=mis_token {RUN}",
        2,
        "trainer.correction.mode='mis_token': ppo's loss takes no per-token importance weight",
    ),
    _c(
        f"rlexp agent=tools trainer.correction.mode=tis_token {RUN}",
        2,
        "trainer.correction.mode='tis_token': agent=tools' episodes carry no sampler log-probabilities",
    ),
    _c(f"rlexp trainer.rollout.dtype=bfloat16 {RUN}", 2, "trainer.rollout.dtype='bfloat16': the vanilla engine's"),
    _c(f"rlexp slice=cpu-4 slice.rollout_devices=2 trainer.rollout.dtype=fp8 {RUN}", 2, "trainer.rollout.dtype='fp8'"),
    # bounded staleness (rlexp.algorithms.off_policy): the value, and what does not combine with batches sampled ahead
    _c(
        f"rlexp trainer.off_policy.max_staleness=-1 {RUN}",
        2,
        "trainer.off_policy.max_staleness=-1: use an integer >= 0",
    ),
    _c(
        f"rlexp trainer=ppo trainer.off_policy.max_staleness=1 {RUN}",
        2,
        "trainer.off_policy.max_staleness=1: ppo's critic values each batch while it samples",
    ),
    _c(
        f"rlexp trainer.num_iterations=2 trainer.off_policy.max_staleness=1 {RUN}",
        2,
        "trainer.off_policy.max_staleness=1: with trainer.num_iterations=2 Tunix takes pi_old",
    ),
    _c(
        f"rlexp agent=tools trainer.off_policy.max_staleness=2 {RUN}",
        2,
        "trainer.off_policy.max_staleness=2: agent=tools' episodes sample turn by turn",
    ),
    _c(
        f"rlexp trainer=dapo trainer.correction.mode=tis_token trainer.off_policy.max_staleness=1 {RUN}",
        2,
        "trainer.off_policy.max_staleness=1: DAPO's dynamic sampling corrects each sampling round",
    ),
    _c(
        f"rlexp slice=cpu-4 slice.nodes=2 trainer.off_policy.max_staleness=1 {RUN}",
        2,
        "trainer.off_policy.max_staleness=1: a run of several JAX processes",
    ),
    _c(f"rlexp {TPU} slice.num_slices=0 {RUN}", 2, "slice.num_slices=0"),
    _c(f"rlexp objective=eval.after.pass@1 {RUN}", 2, "did you mean eval.after.pass_at_1"),
    _c(f"rlexp reward.max_error_ratio=2 {RUN}", 2, "reward.max_error_ratio=2"),
    _c(f"rlexp validate.rows=-1 {RUN}", 2, "validate.rows=-1"),
    _c(f"rlexp hydra.launcher.max_restarts=-1 {TPU} {RUN}", 2, "hydra.launcher.max_restarts=-1"),
    _c(f"rlexp slice=v6e-32 {RUN}", 2, "hydra.launcher.output_root"),
    _c(f"rlexp model.path=/nonexistent/model {RUN}", 2, "model.path='/nonexistent/model'"),
    _c(f"rlexp model.path={{models}}/trunc_st {RUN}", 1, "trunc_st/model.safetensors: not a complete safetensors"),
    _c(f"rlexp model.path={{models}}/garbage_st {RUN}", 1, "garbage_st/model.safetensors"),
    _c(f"rlexp model.path={{models}}/trunc_cfg {RUN}", 1, "trunc_cfg/config.json: not a readable config.json"),
    _c(f"rlexp model.path={{models}}/bad_tok {RUN}", 1, "bad_tok/tokenizer.json"),
    _c(f"rlexp model.path={{models}}/no_weights {RUN}", 2, "no *.safetensors"),
    _c(f"rlexp model.path={{models}}/wrong_layers {RUN}", 2, "num_layers"),
    # values the config layer refused only later (a traceback) or never (a wrong result)
    _c(f"rlexp seed=-1 {RUN}", 2, "seed=-1: use an integer in [0, 4294967295]"),
    _c(f"rlexp seed=99999999999999999999 {RUN}", 2, "seed=99999999999999999999"),
    _c(f"rlexp trainer.final_lr_ratio=2 {RUN}", 2, "trainer.final_lr_ratio=2.0"),
    _c(f"rlexp {TPU} slice.chips=7 {RUN}", 2, "slice.chips=7: v6e-32 (4x8) has 32"),
    _c(f"rlexp {TPU} hydra.launcher.image= {RUN}", 2, "hydra.launcher.image=''"),
    _c(
        f"rlexp reward=http reward.functions.0.kwargs.url=http://127.0.0.1:9/ reward.functions.0.kwargs.timeout_s=-1 {RUN}",
        2,
        "reward.functions[0].kwargs.timeout_s=-1",
    ),
    # a service that takes the connection and never answers: asked before any weights load, not at every batch
    _c(
        "rlexp reward=http reward.functions.0.kwargs.url=http://127.0.0.1:{busy}/ "
        f"reward.functions.0.kwargs.timeout_s=1 reward.functions.0.kwargs.retries=1 {RUN}",
        1,
        "reward.functions[0].kwargs.url=http://127.0.0.1:{busy}/: the reward service does not answer",
    ),
    _c(f"rlexp data_template.template=Solve_this. {RUN}", 2, "must hold {question}"),
    _c(f"rlexp data_template.template='{{q}}' {RUN}", 2, "not {q}"),
    _c(
        f"rlexp chat_template.chat='{{%_if_x_%}}' {RUN}",
        2,
        "chat_template.chat='<plain>': Jinja syntax error on line 1",
    ),
    # user rewards: what the function returned, and where
    _c(
        f"rlexp reward=python reward.functions.0.kwargs.function={{files}}/rewards.py:huge logger=none {RUN}",
        1,
        "returned 1e+30, outside reward.functions[0].range=[-1, 1]",
    ),
    _c(
        f"rlexp reward=python reward.functions.0.kwargs.function={{files}}/rewards.py:scalar logger=none {RUN}",
        1,
        "returned float 1.0, not a list of one number per completion",
    ),
    *(  # a user reward that raises or returns no list: the function, its line or what it returned
        _c(
            f"rlexp reward=python reward.functions.0.kwargs.function={{files}}/rewards.py:{fn} logger=none {RUN}",
            1,
            says,
        )
        for fn, says in [
            ("boom", "ValueError: no score for this (rewards.py line 8, in boom)"),
            ("nothing", "returned NoneType None, not a list of one number per completion"),
            ("as_dict", "returned dict {'score': 1.0}, not a list of one number per completion"),
        ]
    ),
    _c(
        "rlexp reward=python reward.functions.0.kwargs.function={files}/rewards.py:forever "
        f"reward.functions.0.kwargs.timeout_s=1 logger=none {RUN}",
        1,
        "timed out after 1s (reward kwargs.timeout_s)",
    ),
    _c(
        f"rlexp reward=python reward.functions.0.kwargs.function={{files}}/unparsable.py:f {RUN}",
        2,
        "unparsable.py:f': SyntaxError",
    ),
    # data files: encoding, format, the schema of a row (file and line named)
    _c(f"rlexp dataset=jsonl dataset.source={{files}}/latin1.jsonl {RUN}", 1, "latin1.jsonl:41: not UTF-8"),
    _c(f"rlexp dataset=parquet dataset.source={{files}}/rows.csv {RUN}", 1, "rows.csv: not a parquet file"),
    _c(f"rlexp dataset=parquet dataset.source={{files}}/rows.jsonl {RUN}", 1, "use dataset=jsonl"),
    _c(
        f"rlexp dataset=jsonl dataset.source={{files}}/list_id.jsonl dataset.id_field=id {RUN}",
        1,
        "list_id.jsonl:41: id holds a list",
    ),
    _c("rlexp hydra.run.dir=/proc/no/such/run", 1, "hydra.run.dir=/proc/no/such/run"),
    _c("rlexp hydra.run.dir={files}/afile", 1, "hydra.run.dir={files}/afile"),
    _c(f"rlexp output_dir={{files}}/afile/run {RUN}", 1, "output_dir={files}/afile/run"),
    # multiruns: refused before sweep.json is written, or every job refused and recorded as failed
    _c(
        "rlexp -m trainer.batch_size=0,-1 hydra.sweep.dir={tmp}/sweep sweep.progress=false",
        2,
        "batch_size=0",
        check="sweep_failed",
    ),
    _c("rlexp -m sweep.direction=up hydra.sweep.dir={tmp}/sweep", 2, "sweep.direction='up'", check="no_sweep_json"),
    _c(
        "rlexp -m seed=range(0,1000) trainer.batch_size=0 hydra.sweep.dir={tmp}/sweep",
        2,
        "trainer.batch_size=0: must be > 0 (every one of the sweep's 1000 jobs is refused for this; none ran)",
        check="sweep_failed",
    ),
    _c(
        "rlexp -m seed=range(0,0) hydra.sweep.dir={tmp}/sweep",
        2,
        "seed='range(0,0)': an empty sweep",
        check="no_sweep_json",
    ),
    _c("rlexp -m seed=range(0,10,0) hydra.sweep.dir={tmp}/sweep", 2, "step must not be 0", check="no_sweep_json"),
    _c(
        "rlexp -m trainer=glob(nosuch*) hydra.sweep.dir={tmp}/sweep",
        2,
        "trainer='glob(nosuch*)': an empty sweep",
        check="no_sweep_json",
    ),
    _c(
        "rlexp -m hydra/sweeper=optuna hydra.sweeper.n_trials=0 trainer.learning_rate=interval(1e-4,1e-2) "
        "hydra.sweep.dir={tmp}/sweep",
        2,
        "hydra.sweeper.n_trials=0",
        check="no_sweep_json",
    ),
    _c(
        "rlexp -m hydra/launcher=slurm hydra.launcher.timeout_min=-5 hydra.sweep.dir={tmp}/sweep",
        2,
        "hydra.launcher.timeout_min=-5: use the job's time limit in minutes, > 0",
        check="no_sweep_json",
    ),
    _c("rlexp -m sweep.resume=true hydra.sweep.dir={tmp}/nosweep", 2, "sweep.resume=True", check="no_sweep_json"),
    _c("rlexp -m trainer.beta=0,,1 hydra.sweep.dir={tmp}/sweep", 2, "trainer.beta=0,,1", check="no_sweep_json"),
    _c("rlexp -m +sweep=nosuch hydra.sweep.dir={tmp}/sweep", 2, "sweep='nosuch'", check="no_sweep_json"),
    _c(
        "rlexp -m hydra/launcher=gke hydra.launcher.max_restarts=-1 hydra.launcher.dry_run=true hydra.sweep.dir={tmp}/sweep",
        2,
        "hydra.launcher.max_restarts=-1",
        check="no_sweep_json",
    ),
    _c(
        "rlexp -m +trainer.learning_rat=1,2 hydra.sweep.dir={tmp}/sweep sweep.progress=false",
        2,
        "did you mean trainer.learning_rate",
        check="sweep_failed",
    ),
    # issue 42: each message names the key at fault and its fix
    _c(f"rlexp model.max_context=0 {RUN}", 2, "model.max_context=0: use an integer >= 1"),
    _c(f"rlexp dataset.params.max_operand=-1 {RUN}", 2, "dataset.params.max_operand=-1: use an integer in [0, 999]"),
    _c(f"rlexp dataset.params.max_operand=0 {RUN}", 2, "dataset.params.max_operand=0: gives only 1 distinct problems"),
    _c(f"rlexp profile.steps=1 profile.dir={{files}}/afile/prof {RUN}", 1, "profile.dir={files}/afile/prof: "),
    *(  # without gcsfs only: with it the command would reach for the bucket
        [_c(f"rlexp model.path=gs://rlexp-no-bucket/model {RUN}", 2, "model.path=gs://rlexp-no-bucket/model: ")]
        if importlib.util.find_spec("gcsfs") is None
        else []
    ),
    _c(
        f"rlexp reward=code_tests dataset=jsonl dataset.source={REPO}/tests/fixtures/code/problems.jsonl "
        f"dataset.answer_field=tests {RUN}",
        2,
        "trainer.max_prompt_tokens=16: every prompt of the train split is longer (11 prompts of 38 to 91 tokens",
    ),
    _c(
        "rlexp -m hydra/sweeper=optuna hydra.sweeper.n_trials=2 trainer.learning_rate=interval(1e-2,1e-4) "
        "hydra.sweep.dir={tmp}/sweep",
        2,
        "trainer.learning_rate='interval(1e-2,1e-4)': low 0.01 is above high 0.0001",
        check="no_sweep_json",
    ),
    _c(
        "rlexp -m hydra/sweeper=optuna hydra.sweeper.n_trials=2 trainer.learning_rate=tag(log,interval(-1,1e-2)) "
        "hydra.sweep.dir={tmp}/sweep",
        2,
        "a log interval needs low > 0",
        check="no_sweep_json",
    ),
    _c(
        "rlexp -m trainer.learning_rate=interval(1e-4,1e-2) hydra.sweep.dir={tmp}/sweep",
        2,
        "trainer.learning_rate='interval(1e-4,1e-2)': an interval is a search space for hydra/sweeper=optuna",
        check="no_sweep_json",
    ),
    _c(f"rlexp {TPU} hydra.launcher.queue= {RUN}", 2, "hydra.launcher.queue='': name the Kueue LocalQueue"),
    Case(
        ("rlexp", *TPU.split(" "), RUN),
        2,
        "hydra.launcher.image='Bad Image!!': not an OCI image reference (set by env RLEXP_IMAGE)",
        env=(("RLEXP_IMAGE", "Bad Image!!"),),
    ),
    _c(
        "rlexp -m hydra/launcher=slurm hydra.launcher.partition= hydra.sweep.dir={tmp}/sweep",
        2,
        "hydra.launcher.partition='': name a partition",
        check="no_sweep_json",
    ),
]

VALIDATE = [
    _c(f"rlexp.validate dataset.path=x {RUN}", 2, "did you mean dataset.source"),
    _c(f"rlexp.validate model=qwen3_06b {RUN}", 2, "did you mean qwen3_0_6b"),
    _c(f"rlexp.validate experiment=nosuch {RUN}", 2, "experiment='nosuch'"),
    _c(f"rlexp.validate trainer.learning_rate=1e-3,,3e-3 {RUN}", 2, "trainer.learning_rate=1e-3,,3e-3"),
    _c(f"rlexp.validate validate.rows=-1 {RUN}", 2, "validate.rows=-1"),
    _c(f"rlexp.validate validate.rows=0 {RUN}", 2, "validate.rows=0"),
    _c(f"rlexp.validate validate.generations=0 {RUN}", 2, "validate.generations=0"),
    _c(f"rlexp.validate validate.completions={{tmp}}/missing.jsonl {RUN}", 2, "validate.completions="),
    _c(f"rlexp.validate validate.completions={{files}}/empty.jsonl {RUN}", 1, "holds no completions"),
    _c(f"rlexp.validate validate.completions={{files}}/corrupt.jsonl {RUN}", 1, "line 2 is not JSON"),
    _c(f"rlexp.validate validate.completions={{files}}/binary.jsonl {RUN}", 1, "not UTF-8"),
    _c(f"rlexp.validate validate.completions={{files}}/noid.jsonl {RUN}", 1, "line 1 needs an id"),
    _c(f"rlexp.validate model.path={{models}}/trunc_st {RUN}", 1, "trunc_st/model.safetensors"),
    _c(f"rlexp.validate +validate.rowz=3 {RUN}", 2, "did you mean validate.rows"),
    _c(
        "rlexp.validate reward=python reward.functions.0.kwargs.function={files}/rewards.py:as_text "
        f"validate.completions={{files}}/scored.jsonl {RUN}",
        1,
        "returned str 'high' where a number belongs",
    ),
    # issue 42: secrets never printed, new keys' values refused before a run starts
    _c(
        f"rlexp.validate reward=judge reward.functions.0.kwargs.model=m reward.functions.0.kwargs.api_key={SECRET} {RUN}",
        2,
        "reward.functions.0.kwargs.api_key='***'",
        check="no_secret",
    ),
    _c(f"rlexp.validate reward=code_tests reward.functions.0.kwargs.memory_mb=-5 {RUN}", 2, "kwargs.memory_mb=-5"),
    _c(
        "rlexp.validate reward=python reward.functions.0.kwargs.function={files}/rewards.py:scalar "
        f"reward.functions.0.kwargs.memory_mb=-5 {RUN}",
        2,
        "kwargs.memory_mb=-5",
    ),
    _c(
        "rlexp.validate reward=python reward.functions.0.kwargs.function={files}/rewards.py:scalar "
        f"reward.functions.0.kwargs.kwargs=5 {RUN}",
        2,
        "kwargs.kwargs=5: use a mapping",
    ),
    _c(
        "rlexp.validate agent=tools chat_template=chatml "
        f"agent.tools=[{{name:http,kwargs:{{url:'http://127.0.0.1:1/',token_env:RLEXP_TEST_NO_SUCH_VAR}}}}] {RUN}",
        2,
        "agent.tools[0].kwargs.token_env='RLEXP_TEST_NO_SUCH_VAR'",
    ),
    _c(
        "rlexp.validate agent=tools chat_template=chatml "
        f"agent.tools=[{{name:http,kwargs:{{url:'http://127.0.0.1:1/',timeout_s:-1}}}}] {RUN}",
        2,
        "agent.tools[0].kwargs.timeout_s=-1",
    ),
    _c(
        "rlexp.validate agent=tools chat_template=chatml "
        f"agent.tools=[{{name:http,kwargs:{{url:'http://127.0.0.1:1/',retries:-1}}}}] {RUN}",
        2,
        "agent.tools[0].kwargs.retries=-1: use a whole number >= 0",
    ),
    _c(
        f"rlexp agent=tools chat_template=chatml agent.tools=[{{name:http,kwargs:{{url:'http://127.0.0.1:1/'}}}},"
        f"{{name:http,kwargs:{{url:'http://127.0.0.1:2/'}}}}] {RUN}",
        2,
        "each tool may be offered once (an http tool: give each its own name)",
    ),
    _c(f"rlexp.validate cost.price_per_chip_hour=-1 {RUN}", 2, "cost.price_per_chip_hour=-1.0"),
    _c(
        "rlexp.validate reward=http reward.functions.0.kwargs.url=http://127.0.0.1:{closed}/ "
        f"reward.functions.0.kwargs.retries=0 validate.completions={{files}}/scored.jsonl {RUN}",
        1,
        "4 errors, 0 non-finite",
    ),
]

REPORT = [
    _c("rlexp.report", 2, "inputs: missing"),
    _c("rlexp.report /nonexistent/sweep", 2, "/nonexistent/sweep: no such run or sweep dir"),
    _c("rlexp.report {files}/emptydir --out {tmp}/r.html", 2, "no runs found"),
    _c("rlexp.report {files}/binary_run --out {tmp}/r.html", 1, "binary_run/metrics.jsonl: not UTF-8"),
    _c("rlexp.report {files}/list_summary --out {tmp}/r.html", 1, "list_summary/summary.json: holds a list"),
    _c("rlexp.report {fixture_runs} --out {files}/adir", 1, "adir"),
    _c(
        "rlexp.report {fixture_runs} --objective eval.after.nonexistent --out {tmp}/r.html",
        2,
        "--objective=eval.after.nonexistent",
    ),
    _c("rlexp.report {fixture_runs} --bogus", 2, "--bogus: no such argument"),
]

EXPORT = [
    _c("rlexp.export", 2, "checkpoint, --out: missing"),
    _c("rlexp.export /nonexistent/run --out {tmp}/hf", 2, "checkpoint=/nonexistent/run: no such run dir"),
    _c("rlexp.export {files}/emptydir --out {tmp}/hf", 2, "no checkpoints/actor/<step>"),
    _c("rlexp.export {files}/emptydir", 2, "--out: missing"),
]

JOBS = [
    _c("rlexp.jobs", 2, "command: missing"),
    _c("rlexp.jobs frob x", 2, "command=frob: no such choice"),
    _c("rlexp.jobs status /no/such/sweep", 2, "target=/no/such/sweep"),
    _c("rlexp.jobs status Bad_Name!", 2, "target=Bad_Name!"),
    _c("rlexp.jobs status {files}/badlauncher", 1, "badlauncher/launcher.json: not a launcher record"),
    _c("rlexp.jobs cancel {files}/binlauncher", 1, "binlauncher/launcher.json: not a launcher record"),
    _c("rlexp.jobs logs {files}/nolauncher", 2, "no launcher.json"),
    _c("rlexp.jobs status", 2, "target: missing"),
    _c("rlexp.jobs --namespace", 2, "--namespace"),
    _c("rlexp.jobs logs {files}/dryrun", 2, "JobSet dry-job is a dry run"),
]

SERVE = [
    _c("rlexp.serve_reward --port -5", 2, "--port=-5: must be in [0, 65535]"),
    _c("rlexp.serve_reward --port 99999", 2, "--port=99999"),
    _c("rlexp.serve_reward --port abc", 2, "--port=abc: not an integer"),
    _c("rlexp.serve_reward --port {busy}", 1, "--port={busy}: cannot listen"),
    _c("rlexp.serve_reward --host 203.0.113.1 --port 0", 1, "cannot listen on 203.0.113.1"),
    _c("rlexp.serve_reward --fault-rate 2", 2, "--fault-rate=2: must be in [0, 1]"),
    _c("rlexp.serve_reward --fault-rate nan", 2, "--fault-rate=nan: must be a finite number"),
    _c("rlexp.serve_reward --faults boom", 2, "--faults=boom"),
    _c("rlexp.serve_reward --fault-delay-s -1", 2, "--fault-delay-s=-1"),
    _c("rlexp.serve_reward --reward nosuch", 2, "--reward=nosuch: no such reward"),
    _c("rlexp.serve_reward --function nosuch_module:fn", 2, "--function=nosuch_module:fn"),
    _c("rlexp.serve_reward --function {files}/rewards.py:missing", 2, "--function={files}/rewards.py:missing"),
    _c(
        "rlexp.serve_reward --function {files}/unparsable.py:f",
        2,
        "--function={files}/unparsable.py:f: cannot load it; SyntaxError",
    ),
    _c("rlexp.serve_reward --token-env RLEXP_TEST_NO_SUCH_VAR", 2, "--token-env=RLEXP_TEST_NO_SUCH_VAR"),
    _c("rlexp.serve_reward --reward judge --port 0", 2, "--reward=judge: --kwarg model is missing"),
    _c(
        f"rlexp.serve_reward --reward judge --kwarg model=m --kwarg base_url=ftp://x --kwarg api_key={SECRET}",
        2,
        "--kwarg base_url='ftp://x': use the endpoint's http(s) URL",
        check="no_secret",
    ),
]

TOOLS = [
    _c("rlexp.models.tiny_random", 2, "family, --out: missing"),
    _c("rlexp.models.tiny_random llama --out {tmp}/m", 2, "family=llama: no such choice"),
    _c("rlexp.models.tiny_random gemma4 --out {files}/afile/m", 1, "--out={files}/afile/m"),
    _c("scripts/make_tiny_model.py --steps abc", 2, "--steps=abc"),
    _c("scripts/make_tiny_model.py --steps 0", 2, "--steps=0"),
    _c("scripts/make_tiny_model.py --label-smoothing 1", 2, "--label-smoothing=1"),
    _c("scripts/make_tiny_model.py --out {files}/afile", 2, "--out={files}/afile"),
    _c("scripts/make_tiny_model.py --out {tmp}/m model=qwen3_06b", 2, "did you mean qwen3_0_6b"),
    _c("scripts/local_slurm.sh frob", 2, "command=frob"),
    _c("scripts/local_slurm.sh", 2, "use up, down or status"),
]

# Refused commands aimed at a finished run dir: each must leave every byte of it as it was.
RUN_DIR = [
    _c("rlexp {train} trainer.batch_size=4 hydra.run.dir={run}", 2, "trainer.batch_size=4", run_dir=True),
    _c("rlexp {train} trainer.resume=never hydra.run.dir={run}", 2, "trainer.resume='never'", run_dir=True),
    _c("rlexp trainer.max_steps=-5 model=qwen3_0_6b hydra.run.dir={run}", 2, "trainer.max_steps=-5", run_dir=True),
    _c("rlexp {train} +trainer.learning_rat=1 hydra.run.dir={run}", 2, "trainer.learning_rat", run_dir=True),
    _c("rlexp {train} model=qwen3_06b hydra.run.dir={run}", 2, "model='qwen3_06b'", run_dir=True),
    _c("rlexp {train} trainer.learning_rate=1e-3,,3e-3 hydra.run.dir={run}", 2, "not a valid override", run_dir=True),
    _c("rlexp {train} objective=eval.after.pass@1 hydra.run.dir={run}", 2, "objective=", run_dir=True),
    _c("rlexp {train} model.path={models}/trunc_st hydra.run.dir={run}", 1, "trunc_st/model.safetensors", run_dir=True),
    _c("rlexp.validate validate.rows=-1 hydra.run.dir={run}", 2, "validate.rows=-1", run_dir=True),
    _c(
        "rlexp.validate validate.completions={tmp}/no.jsonl hydra.run.dir={run}",
        2,
        "validate.completions",
        run_dir=True,
    ),
    _c("rlexp.export {run} --out {run}", 2, "a folder holding other files", run_dir=True),
    _c("rlexp.export {run} --out {run}/config.yaml", 2, "a file is there", run_dir=True),
    _c("rlexp.export {run}/checkpoints/actor/99 --out {tmp}/hf", 2, "no such step; saved steps: 3", run_dir=True),
    _c("rlexp.export {damaged}/checkpoints/actor/3 --out {tmp}/hf", 1, "cannot be restored"),
    _c("rlexp.export {damaged}/../bad_config --out {tmp}/hf", 1, "not the config of an rlexp run"),
    _c("rlexp.report {run} --objective eval.after.nonexistent --out {tmp}/r.html", 2, "--objective=", run_dir=True),
    _c("rlexp.jobs status {run}", 2, "no launcher.json", run_dir=True),
    _c("rlexp.eval {damaged}", 1, "checkpoints/actor/3: cannot be restored ("),
    _c("rlexp.eval {damaged}/../bad_config", 1, "bad_config/.hydra/config.yaml: not the config of an rlexp run"),
    # the newest checkpoint damaged, an older one whole: the fix names the older step, and nothing is changed
    *(
        _c(
            f"rlexp.eval {{stale}}/{how}",
            1,
            f"{{stale}}/{how}/checkpoints/actor/6: cannot be restored (",
            run_dir=True,
            fix=f"evaluate another step: rlexp eval {{stale}}/{how} <step> (saved: 3)",
        )  # fmt: skip
        for how in ("cut", "lost")
    ),
    _c(
        "rlexp.export {stale}/lost --out {tmp}/hf",
        1,
        "{stale}/lost/checkpoints/actor/6: cannot be restored (model_params/",
        run_dir=True,
        fix="export another step (3)",
    ),  # fmt: skip
]

CASES = [*RLEXP, *VALIDATE, *REPORT, *EXPORT, *JOBS, *SERVE, *TOOLS]
SLOW_CASES = RUN_DIR
