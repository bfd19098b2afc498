"""A training session: everything one job does, in order.

The run's plan (rlexp.train.plan) made every check and decision before JAX was imported (run dir, resume, lock,
estimates); the session trusts it.

1. load and render data, check max_steps against it;
2. load tokenizer and policy through the model group's loader, the reference as an on-device copy of the policy;
3. build Tunix's RLCluster (which restores the latest checkpoint) and learner;
4. eval before training (or reuse it when resuming), train with step hooks, eval after;
5. write summary.json and finish the tracker, whatever happened.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
from omegaconf import DictConfig, OmegaConf

from rlexp import log_setup, storage
from rlexp import tunix as tunix_seam
from rlexp.algorithms import off_policy
from rlexp.algorithms.registry import algorithm_of, reference_copy
from rlexp.config.schema import RlexpConfig
from rlexp.config.validate import check_steps
from rlexp.data.templates import check_turn_markers, render_splits
from rlexp.envs import (
    adaptive_weights,
    check_tasks_kept,
    load_rows,
    task_metrics,
    toolbox,
    tools_prompt,
)
from rlexp.envs.adaptive import STATE_KEY as ADAPTIVE_KEY
from rlexp.errors import ConfigError, RlexpError, RunError
from rlexp.estimates.flops import rates_of
from rlexp.rewards.compose import RewardErrorBudgetExceeded, build_rewards
from rlexp.rewards.registry import probe_services
from rlexp.tools.toolbox import ServiceDown
from rlexp.tracking.process import DEFAULT_FACTORY, TrackerProcess
from rlexp.train import heap, rundir
from rlexp.train.batches import batches, cycle_batches, train_batches
from rlexp.train.checkpoint_rows import carried, carry_rows, put_back_rows
from rlexp.train.checkpoints import record_files, restorable
from rlexp.train.collectives import settle
from rlexp.train.metrics import MetricsCollector, group_stats, rlexp_metric_key, to_json_line
from rlexp.train.run_summary import build_summary, print_summary
from rlexp.train.stepclock import EVAL, STEP, StepClock

if TYPE_CHECKING:
    from rlexp.train.graceful_stop import GracefulStop
    from rlexp.train.hooks import StepContext
    from rlexp.train.plan import RunPlan

log = logging.getLogger(__name__)


class TrainingSession:
    def __init__(self, plan: RunPlan, conf: RlexpConfig, cfg: DictConfig, stop: GracefulStop) -> None:
        """`stop`: SIGTERM / Ctrl-C while training (its handlers are installed around `learner.train`)."""
        self.plan, self.conf, self.cfg, self.run_dir, self.stop = plan, conf, cfg, plan.run_dir, stop
        self.start_step = plan.resume_step // conf.trainer.num_iterations  # the restored step, set again once built
        self.path = lambda name: storage.join(plan.run_dir, name)  # noqa: E731
        self.collector = MetricsCollector(updates_per_step=conf.trainer.num_iterations)
        self.step_rates = rates_of(conf)  # perf/tokens_per_sec and perf/mfu of each step
        self.reward_error: RlexpError | None = None
        self.evals: dict[str, dict[str, float]] = {}
        self.scorer: Any = None  # the eval's scorer over the run's reward functions, built at the first eval
        self.clock = StepClock()  # perf/step_time_sec, less checkpoint saves and mid-run evals
        self._bar: Any = None
        self.classes: dict[str, str] = {}  # the Tunix classes that ran (rlexp.tunix.ran_classes)
        self.profile: str | None = None  # the trace's folder (profile.steps), once the trainer has its profiler
        self.episodes: Any = None  # agent=tools: the episode runner (rlexp.train.episodes)
        self.adaptive = adaptive_weights(conf)  # env.adaptive: task weights toward learnable tasks, else None
        self.off_policy: Any = None  # trainer.off_policy: the queue of batches sampled ahead (rlexp.train.off_policy)
        # Every process trains (collectives); only process 0 writes the run files and the tracker.
        self.primary = jax.process_index() == 0

    # -- setup -------------------------------------------------------------------------------
    def _load_data(self, tokenizer: Any) -> None:
        raw = load_rows(self.conf)  # the dataset group's rows, or the env's (rlexp.envs)
        check_turn_markers(raw.train, self.conf.data_template, self.conf.chat_template, tokenizer)  # as the preflight
        conf = self.conf
        system = tools_prompt(conf)  # the offered tools, with agent=tools
        splits = render_splits(
            raw, conf.data_template, conf.chat_template, tokenizer, conf.trainer.max_prompt_tokens, system
        )
        check_tasks_kept(raw, splits, conf.trainer.max_prompt_tokens)  # env=...: no task lost to the filter
        if len(splits.train) != self.plan.checked_train_rows:  # the plan checked dataset.train_size rows
            check_steps(self.conf, len(splits.train))  # after filtering: the rows that will really be trained on
        if not splits.eval:
            raise ConfigError(
                "dataset.eval_size", self.conf.dataset.eval_size, "the eval split is empty after filtering"
            )
        self.train_rows = splits.train
        self.eval_rows = splits.eval[: self.conf.trainer.eval_prompts]
        self.data_skipped = dict(splits.skipped)
        if self.data_skipped:
            log.info("rlexp: rows not used: %s", self.data_skipped)

    def _load_models(self) -> tuple[Any, Any]:
        """The policy and the reference model (None when the policy's frozen base or nothing serves as it)."""
        from rlexp.families.load import copy_model, load_model
        from rlexp.train.cluster import build_meshes

        self.meshes = build_meshes(self.conf)
        t = self.conf.trainer
        base = load_model(self.conf.model, self.meshes[0])
        load_own = algorithm_of(t).load_reference  # the algorithm's own model in the reference role (OPD's teacher)
        own = load_own(self.conf, self.meshes[0]) if load_own is not None else None
        if t.lora.rank > 0:
            from rlexp.models.lora import apply_lora

            # Only the adapters train; the frozen base they sit on is the reference policy itself.
            return apply_lora(base, t.lora, self.meshes[0], seed=self.conf.seed), base if own is None else own
        reference = copy_model(base) if reference_copy(t) else None  # on device, not read from disk again
        return base, reference if own is None else own

    def _load_critic(self) -> Any:
        """The value model of an algorithm that trains one (PPO; rlexp.families.critic); None for the others."""
        if not algorithm_of(self.conf.trainer).needs_critic:
            return None
        from rlexp.families.critic import load_critic

        return load_critic(self.conf, self.meshes[0])

    def _spawn_tracker(self) -> TrackerProcess | None:
        if not self.primary or self.conf.logger.name == "none":
            return None
        return TrackerProcess(self.conf.logger.name)

    def _tracker_args(self, resolved: Any) -> tuple[Any, ...]:
        """`make_tracker`'s arguments for the tracker's process, with the job's place in a sweep read here."""
        from rlexp.tracking.context import run_context

        return self.conf, self.run_dir, resolved, run_context(self.conf)

    def _refill(self) -> Any:
        """Dynamic sampling's further prompts: the train split in its own shuffled order (seeded apart from the
        training order, a new order each pass), so the training order and its resume stay as without it."""
        t = self.conf.trainer
        return cycle_batches(lambda n: batches(self.train_rows, t.batch_size, 1, self.conf.seed + 7919 * (n + 1)))

    def _attach_off_policy(self, learner: Any, start_step: int) -> Any:
        from itertools import islice

        from rlexp.train.off_policy_learner import attach

        t = self.conf.trainer
        shuffle = self.conf.dataset.shuffle != "maxtext"
        return attach(
            learner,
            self.conf,
            # the order learner.train gets (below), from a step on
            rows=lambda step: islice(
                batches(self.train_rows, t.batch_size, t.epochs, self.conf.seed, shuffle), step - 1, None
            ),
            seed=self.rollout_seed,
            start_step=start_step,
            run_dir=self.run_dir if self.primary else None,
            on_metrics=self.collector.add,
            write_samples=lambda rows: self.samples.write(rows),
        )

    # -- hook callbacks -----------------------------------------------------------------------
    def _checkpoint_state(self, step: int) -> dict[str, Any]:
        """What a checkpoint of `step` carries beside its rows: the adaptive task weights' state."""
        state = self.adaptive.state(step) if self.adaptive is not None else None
        return {} if state is None else {ADAPTIVE_KEY: state}

    def _restore_state(self) -> None:
        """The adaptive weights' state the restored checkpoint carried: the resumed run draws as the first did."""
        if self.adaptive is not None:
            state = carried(self.cluster.actor_trainer, ADAPTIVE_KEY)
            if state is None:
                raise RunError(f"{self.run_dir}: its checkpoint carries no env.adaptive state; resume with it off")
            self.adaptive.restore(state)

    def _step_context(self) -> StepContext:
        """What the step hooks may read and call (rlexp.train.hooks.StepHooks), once the cluster is built."""
        from rlexp.train.hooks import StepContext

        return StepContext(
            start_step=self.start_step,
            eval_every=self.conf.trainer.eval_every,
            max_steps=self.conf.trainer.max_steps,
            updates_per_step=self.conf.trainer.num_iterations,
            collector=self.collector,
            clock=self.clock,
            stop=self.stop,
            flush_metrics=self.flush_metrics,
            record_files=(lambda: record_files(self.run_dir)) if self.primary else (lambda: None),
            set_rollout_seed=self.set_rollout_seed,
            run_eval=self.run_eval,
            progress=self.progress,
            reward_error=lambda: self.reward_error,
            global_steps=lambda: self.cluster.global_steps,
        )

    def metric_fn(self, prompts, completions, rewards, advantages, **fields):  # noqa: ANN001, ANN201
        """Tunix metric_fn: reward statistics and samples of the step being rolled out."""
        ahead = self.off_policy.sampling() if self.off_policy is not None else None  # a batch sampled ahead
        step = ahead.step if ahead is not None else self.cluster.global_steps + 1
        g = self.conf.trainer.num_generations
        out = group_stats(rewards, g) if g > 1 else {"rewards/std": float(np.std(rewards))}  # PPO: no groups
        per_sample = {k: list(v) for k, v in self.rewards.stats.rows.items()}  # (value, error) per completion
        if self.episodes is not None and self.episodes.failure is not None:
            # a named cause first (a tool over agent.tool_error_budget, an environment's server gone), before the
            # reward budget it breaks too
            self.reward_error = self.reward_error or self.episodes.failure
        try:
            out.update(self.rewards.step_metrics())
        except RlexpError as err:  # acted on by the step hook, after this step's checkpoint
            self.reward_error = self.reward_error or err
        if "task" in fields:  # env=...: env/<task>/reward_mean, errors, latency (rlexp.envs)
            errored = [any(v[i][1] is not None for v in per_sample.values()) for i in range(len(rewards))]
            out.update(task_metrics(fields["task"], rewards, errored, self.rewards))
            if self.adaptive is not None:  # env/<task>/weight and learnable; the weights move (rlexp.envs.adaptive)
                out.update(self.adaptive.observe(step, list(fields["task"]), list(rewards), g))
        if step == 1 or step % self.conf.trainer.samples_every == 0:
            if ahead is None:
                self.samples.write(self._samples_rows(step, prompts, completions, rewards, fields, per_sample))
            else:  # written when its step trains on it, with the policy version that sampled it
                version = {"policy_version": ahead.version}
                ahead.samples.extend(
                    self._samples_rows(step, prompts, completions, rewards, fields, per_sample, version)
                )
        return {rlexp_metric_key(k): (v, np.mean) for k, v in out.items()}

    def _samples_rows(self, step, prompts, completions, rewards, fields, per_sample, extra=None) -> list[str]:  # noqa: ANN001
        """samples.jsonl rows; a completion whose reward errored has `reward: null`, the errored rewards null
        under `rewards` and their error text under `errors` (its training value, its group's mean, is no score)."""
        n = len(completions)
        columns = {k: v for k, v in per_sample.items() if len(v) == n}
        rows = []
        for i in range(n):
            errors = {k: v[i][1] for k, v in columns.items() if v[i][1] is not None}
            row = {
                "step": step,
                "id": str(fields["id"][i]) if "id" in fields else str(i),
                "prompt": str(prompts[i]),
                "completion": completions[i],
                "answer": str(fields["answer"][i]) if "answer" in fields else None,
                "reward": None if errors else float(rewards[i]),
                "rewards": {k: v[i][0] for k, v in columns.items()},
            }
            if errors:
                row["errors"] = errors
            if self.episodes is not None and self.episodes.last is not None:  # the whole conversation
                row["conversation"] = self.episodes.last.conversations[i]
            rows.append(to_json_line({**row, **(extra or {})}))
        return rows

    def flush_metrics(self, last_step: int) -> None:
        records = self.collector.pop_until(last_step)
        for r in records:  # whole by now: the step's time and its rollout's completion length (rlexp.estimates.flops)
            if STEP in r:
                r.update(self.step_rates(r[STEP], r.get("completions/mean_length")))
        if records:
            self.metrics.write([to_json_line(r) for r in records])
            for r in records:
                self.tracker.log(r["step"], {k: v for k, v in r.items() if k != "step"})

    def rollout_seed(self, step: int) -> int:
        # Tunix reuses PRNGKey(0) for every rollout when the seed is unset; a per-step seed keeps
        # runs reproducible and resumable, while seeds of a sweep really differ.
        return self.conf.seed * 1_000_003 + step

    def set_rollout_seed(self, step: int) -> None:
        if self.off_policy is None:  # batches sampled ahead are seeded by their step (rlexp.train.off_policy)
            self.cluster.cluster_config.rollout_config.seed = self.rollout_seed(step)

    def run_eval(self, step: int, label: str | None = None, *, in_actor_update: bool = False) -> dict[str, float]:
        """Eval at `step`, recorded in evals.json under `label` (default: the step).

        `in_actor_update`: called from the step hook, inside Tunix's actor update and its mesh context. jit keys
        traces on the active mesh context, so the evals before and after training enter the same mesh: outside
        it, the first mid-run eval traced and loaded all four eval programs a second time (1.2-2.4 s).
        """
        from tunix.rl.rl_cluster import Role

        from rlexp.train.evaluate import Scorer, evaluate

        if self.scorer is None:
            self.scorer = Scorer(self.conf, self.rewards)
        mesh = self.cluster.cluster_config.role_to_mesh[Role.ACTOR]
        start = time.perf_counter()
        settle()  # multi-process CPU: nothing dispatched before may still run collectives (rlexp.train.collectives)
        # mid-run, with batches sampled ahead on rollout devices: the engine samples with the trainer's weights
        ahead = self.off_policy.trainer_weights() if self.off_policy is not None else contextlib.nullcontext()
        with contextlib.nullcontext() if in_actor_update else mesh, ahead:
            rollout_config = self.cluster.cluster_config.rollout_config
            try:
                result = evaluate(
                    self.cluster, self.eval_rows, self.conf, rollout_config, self.scorer, episodes=self.episodes
                )
            except (RewardErrorBudgetExceeded, ServiceDown) as err:  # too many reward errors, a tool's dead service
                if not in_actor_update:
                    raise
                # the step hook stops the run with a restorable checkpoint; the first cause found is the one said
                # (a step's, or the eval's own: its episodes' tool or server, else the reward budget)
                found = self.episodes.explain("the eval") if self.episodes is not None else None
                self.reward_error = self.reward_error or found or err
                return {}
        took = time.perf_counter() - start
        if in_actor_update:  # between two steps: not the next step's time (rlexp.train.stepclock)
            self.clock.set_aside(took)
        self.collector.add(step, {**{f"eval/{k}": v for k, v in result.items()}, EVAL: took})
        self.evals[label or str(step)] = {**result, "step": step}
        if self.primary:
            storage.write_json(self.path("evals.json"), self.evals)
        return result

    def _warn_if_cut(self, result: dict[str, float]) -> None:
        """A completion budget too short for the task (the embedded default's 4 tokens kept for GSM8K) trains on
        cut answers that no reward can score: say so before the first step, naming the key."""
        share, budget = result.get("truncated", 0.0), self.conf.trainer.max_completion_tokens
        if self.primary and share >= 0.5:
            log.warning(
                "trainer.max_completion_tokens=%d: %.0f%% of the greedy eval's completions used every token without "
                "ending; raise it to fit the task's answers (experiment/ overlays set 768 for GSM8K, 3584 for "
                "OpenMathInstruct-2), or check that chat_template ends a turn with a token the model emits",
                budget,
                share * 100,
            )

    def progress(self, step: int) -> None:
        """A tqdm bar (step, reward, ETA) on a terminal; a line per 10 % of the run in logs."""
        if not self.primary:
            return
        total = self.conf.trainer.max_steps
        reward = self.collector.latest("rewards/sum")
        if not sys.stderr.isatty():
            if step == total or step % max(1, total // 10) == 0:
                elapsed = time.perf_counter() - self.train_started
                eta = elapsed / max(1, step - self.start_step) * (total - step)
                shown = "n/a" if reward is None else f"{reward:.3f}"
                log.info("rlexp: step %d/%d reward %s eta %.0f s", step, total, shown, eta)
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                initial=step - 1,
                desc="train",
                unit="step",
                file=sys.stderr,
                disable=not log_setup.shows(log),  # -q: no bar either
            )
        if reward is not None:
            self._bar.set_postfix(reward=f"{reward:.3f}", refresh=False)
        self._bar.update(1)

    # -- the session ---------------------------------------------------------------------------
    def execute(self, collecting: bool = True) -> dict[str, Any]:
        """Set up, train and evaluate; `collecting`: whether to re-enable the garbage collector once set up
        (rlexp.train.heap: the caller paused it)."""
        from rlexp.data.templates import prompt_width
        from rlexp.tracking import NoTracker
        from rlexp.train.cluster import build_cluster, build_learner
        from rlexp.train.hooks import StepHooks, StopTraining
        from rlexp.train.profile import install_profiler, stop_open_trace

        started = time.perf_counter()
        t = self.conf.trainer
        tunix_seam.check(self.conf)  # every Tunix private this run reaches, fingerprinted (rlexp.tunix.privates)
        # the tracker's process imports its backend (wandb ~1.2 s) on the other core while this one loads
        tracker = self._spawn_tracker()
        try:
            from rlexp.models.loader import load_tokenizer

            # data first: a config the data refuses (too few steps, doubled turn markers) fails before any weights
            tokenizer = load_tokenizer(self.conf.model)
            self._load_data(tokenizer)
            probe_services(self.conf.reward.functions)  # a judge that does not answer fails before any weights
            actor, reference = self._load_models()
            critic = self._load_critic()
            resolved = OmegaConf.to_container(self.cfg, resolve=True)
            if self.primary:  # once data and models passed their checks: a refused run leaves no record
                storage.write_text(self.path("config.yaml"), OmegaConf.to_yaml(self.cfg, resolve=True))
        except BaseException:
            if tracker is not None:
                tracker.close()  # a refused run creates no wandb run
            raise
        # started once data and models passed their checks: wandb's run creation overlaps building the cluster
        # and the eval before training, whose first log waits for it (a tracker that cannot start fails the
        # run before any step)
        self.tracker = NoTracker() if tracker is None else tracker.start(DEFAULT_FACTORY, *self._tracker_args(resolved))
        self.rewards = build_rewards(self.conf.reward, self.conf.trainer.num_generations)
        # pad prompts to the longest one this run will see (train and eval), not to max_prompt_tokens
        width = prompt_width([r["prompt"] for r in self.train_rows + self.eval_rows], tokenizer, t.max_prompt_tokens)
        heap.settle()  # jax, Tunix, the models: RLCluster's own gc.collect() then skips them
        # the cluster restores the newest checkpoint (the plan set damaged ones aside: rlexp.train.checkpoints)
        with restorable(self.run_dir):
            self.cluster = build_cluster(
                self.conf, actor, reference, tokenizer, self.meshes, self.collector, self.run_dir, width, critic
            )
        learner = build_learner(self.conf, self.cluster, self.rewards.fns, [self.metric_fn], refill=self._refill())
        self.classes = tunix_seam.ran_classes(self.cluster, learner)  # summary.json: perf.classes
        if t.num_iterations > 1:  # resume the data at the checkpoint's rollout (rlexp.tunix.learners)
            from rlexp.tunix.learners import resume_data_per_rollout

            resume_data_per_rollout(learner, t.num_iterations)
        if self.conf.agent.kind == "tools":  # rollouts become episodes of turns and tool calls
            from rlexp.train.episodes import EpisodeRunner, install

            # env=class: the class's methods, each episode's calls routed to its own instance (rlexp.envs)
            self.episodes = EpisodeRunner(self.conf, tokenizer, toolbox(self.conf, self.train_rows + self.eval_rows))
            install(learner, self.episodes)
        # an rlexp step is one rollout: num_iterations optimizer updates, each a Tunix train step; checkpoints
        # are numbered by updates, as Tunix restores them
        n = t.num_iterations
        self.start_step = start_step = self.cluster.actor_trainer.train_steps // n  # > 0 after a restore
        if off_policy.enabled(t):  # batches sampled ahead: their queue, restored with the checkpoint
            self.off_policy = self._attach_off_policy(learner, start_step)
        self.cluster.actor_trainer.with_training_hooks(StepHooks(self._step_context()))
        self.clock.time_saves(self.cluster.actor_trainer.checkpoint_manager, t.checkpoint_every * n)
        carry_rows(self.cluster, self.collector, self.clock, t.checkpoint_every, n, self._checkpoint_state)
        self.clock.time_close(self.cluster)
        self.profile = install_profiler(self.cluster.actor_trainer, self.conf, self.run_dir)  # profile.steps
        written: set[int] = set()  # the steps metrics.jsonl holds
        if start_step and storage.exists(self.path("evals.json")):
            self.evals = storage.read_json(self.path("evals.json"))
        # a mid-run eval due at the checkpoint's step that the last run did not finish (a run stopped by a dead
        # service in the next step): run again below, before training resumes
        eval_due = 0 < start_step < t.max_steps and start_step % t.eval_every == 0 and str(start_step) not in self.evals
        if self.primary:
            # steps after the checkpoint are redone: drop what an interrupted run wrote of them. Without a
            # checkpoint (a job killed before its first one, rerun by a sweep resume) everything is redone,
            # the eval before training included.
            for name in ("metrics.jsonl", "samples.jsonl"):
                if storage.exists(self.path(name)):
                    kept = rundir.truncate_jsonl(self.path(name), start_step if start_step else -1)
                    written = kept if name == "metrics.jsonl" else written
        if start_step:
            self._restore_state()
            log.info("rlexp: resuming %s from step %d", self.run_dir, start_step)
            if self.primary and (
                back := put_back_rows(self.cluster.actor_trainer, self.collector, written, self.evals, n)
            ):
                log.info("rlexp: rows of steps %s restored from checkpoint %d", ", ".join(map(str, back)), start_step)
        # its row, written without the eval, takes it in; and a run stopped after its last step's row was written
        # but before summary.json: the final eval, run again below, goes into that row, not into a second one
        final_due = 0 < start_step == t.max_steps
        if self.primary and (eval_due or final_due) and start_step in written:
            self.collector.add(start_step, rundir.pop_row(self.path("metrics.jsonl"), start_step))
        sink = rundir.JsonlSink if self.primary else rundir.NullSink
        self.metrics = sink(self.path("metrics.jsonl"))
        self.samples = sink(self.path("samples.jsonl"))
        if "before" not in self.evals:
            self._warn_if_cut(self.run_eval(0, "before"))
            self.flush_metrics(0)
        if eval_due:
            self.run_eval(start_step)  # due at the checkpoint's step: the last run stopped before it ended
        heap.resume(collecting)
        status, stop_cause = "completed", None
        self.set_rollout_seed(start_step + 1)
        self.clock.restart()
        self.train_started = self.clock.last_end
        with self.stop:
            try:
                if start_step < t.max_steps:
                    learner.train(train_batches(self.conf, self.train_rows, self.adaptive))
            except StopTraining as stop:
                status, stop_cause = ("failed" if stop.cause else "interrupted"), stop.cause
            finally:
                stop_open_trace()  # profile.steps: a run that stopped inside the traced steps keeps its trace
                if self.off_policy is not None:  # its thread stopped; the engine holds the trainer's weights
                    self.off_policy.close()
        steps = self.cluster.actor_trainer.train_steps // n
        if status == "completed" and steps > self.start_step:
            self.collector.add(steps, self.clock.closing())
        if self._bar is not None:
            self._bar.close()
        if status == "completed":
            try:
                self.run_eval(steps, "after")
            except (RewardErrorBudgetExceeded, ServiceDown) as err:  # no accuracy from such an eval: summary says why
                status, stop_cause = "failed", err
        self.flush_metrics(10**9)
        self.metrics.close(), self.samples.close()
        summary = build_summary(self, status, steps, time.perf_counter() - started)
        if self.primary:
            record_files(self.run_dir)  # the last steps, committed once the learner closed its checkpointer
            storage.write_json(self.path("summary.json"), summary)
        self.tracker.finish(summary, exit_code=0 if status == "completed" else 1)
        self.rewards.close()
        if self.episodes is not None:
            self.episodes.tools.close()
        print_summary(summary, self.run_dir)
        if stop_cause is not None:
            raise stop_cause
        if status == "interrupted" and steps == 0:  # nothing to resume from: say so
            raise RunError(f"{self.run_dir}: interrupted before step 1, no checkpoint saved; rerun to start again")
        if status == "interrupted":
            raise RunError(
                f"{self.run_dir}: interrupted at step {steps}, checkpoint saved; rerun the same command to resume"
            )
        return summary
