"""Subclasses of Tunix's sampler, rollout and cluster that read their private state (rows `sampler` of
rlexp.tunix.privates).

`lean_rollout_engine`: the `lean_sampler` perf patch (`perf.patches`), Tunix's vanilla rollout with its per-call
host work cut; without it a colocated rollout and `rlexp eval` sample with Tunix's own `Sampler`.
`recording_cluster_class`: RLCluster keeping each completion's token count (DAPO's overlong shaping) and the
sampler's log-probabilities of its tokens (the mismatch correction, rlexp.algorithms.correction), and setting aside
what a rollout sampled ahead buffers (bounded staleness, rlexp.tunix.ahead).
`qualified_name`: what summary.json's `perf.classes` records of the objects that ran.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from rlexp.config.schema import RlexpConfig

LEAN_SAMPLER = "lean_sampler"  # its name in perf.patches


def uses_lean_sampler(conf: RlexpConfig) -> bool:
    """Whether `perf.patches` selects the lean sampler over Tunix's own `Sampler`."""
    return LEAN_SAMPLER in conf.perf.patches


def lean_rollout_engine() -> type:
    """Tunix's vanilla rollout, with the per-call host work that a GRPO step repeats cut down.

    Profiled on the default run, a 64-completion rollout spent as long in Python as in its compiled
    prefill and decode: ~15 eager JAX ops building the sampling state (each a dispatch, some
    re-lowered every call), 64 tokenizer calls for 8 distinct prompts, and a per-row EOS search
    (64 `np.isin` calls, ~4 ms a step). This sampler builds the state in one compiled call, tokenizes
    each prompt once, pads the prompts and finds every completion's end in single array operations;
    sampling itself is Tunix's (same compiled prefill/decode, same keys, same tokens). Built on first
    use: importing Tunix is slow.
    """
    import dataclasses

    from tunix.generate import base_sampler
    from tunix.generate import sampler as sampler_lib
    from tunix.generate import utils as sampler_utils
    from tunix.rl.rollout import base_rollout, vanilla_rollout

    class LeanSampler(sampler_lib.Sampler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._prompt_ids: dict[str, np.ndarray] = {}
            self._jitted_init_state = jax.jit(
                self._staged_init_state,
                static_argnames=(
                    "total_sampling_steps",
                    "include_logits",
                    "forbidden_token_ids",
                    "temperature",
                    "top_p",
                    "top_k",
                    "beam_size",
                    "include_logprobs",
                ),
            )

        def __call__(self, input_strings: Any, max_generation_steps: int, **options: Any) -> Any:
            """Tunix's `Sampler.__call__` for what rollouts and evals ask (text, tokens and the sampled tokens'
            log-probabilities, unpadded, no echo); anything else (logits, beam search, images, echo) goes to
            Tunix's own."""
            tunix_only = ("echo", "return_logits", "beam_size", "pad_output")
            if any(options.get(k) for k in tunix_only) or options.get("images") is not None:
                return super().__call__(input_strings, max_generation_steps, **options)
            return self._sample_text(input_strings, max_generation_steps, **options)

        def _sample_text(
            self,
            input_strings: Any,
            max_generation_steps: int,
            max_prompt_length: int | None = None,
            eos_tokens: Any = None,
            forbidden_tokens: Any = None,
            temperature: float = 0.0,
            top_p: float | None = None,
            top_k: int | None = None,
            seed: Any = None,
            return_logprobs: bool = False,
            **_: Any,
        ) -> Any:
            self.eos_ids = eos_tokens or [self.tokenizer.eos_id()]
            strings = [input_strings] if isinstance(input_strings, str) else input_strings
            tokens = [self.tokenize(x) for x in strings]
            longest = max(len(x) for x in tokens)
            if max_prompt_length is None or max_prompt_length < longest:
                max_prompt_length = sampler_utils.next_power_of_2(longest)
            # left-padded as Tunix's pad_to_length(left=True) pads each row, in one array
            prompt_ids = np.full((len(tokens), max_prompt_length), self.tokenizer.pad_id(), dtype=tokens[0].dtype)
            for row, ids in zip(prompt_ids, tokens, strict=True):
                row[max_prompt_length - len(ids) :] = ids
            if seed is None or isinstance(seed, int):  # as Tunix: no seed is seed 0
                seed = jax.random.PRNGKey(seed or 0)
            total_sampling_steps = max_prompt_length + max_generation_steps
            if total_sampling_steps > self.cache_config.cache_size:
                raise ValueError(
                    f"Total sampling steps {total_sampling_steps} must be less than the"
                    f" cache size {self.cache_config.cache_size}."
                )
            state = self.init_sample_state(
                jax.numpy.asarray(prompt_ids),
                include_logits=False,
                total_sampling_steps=total_sampling_steps,
                forbidden_token_ids=tuple(forbidden_tokens) if forbidden_tokens else None,
                temperature=temperature,
                top_p=top_p,
                top_k=top_k,
                seed=seed,
                beam_size=None,
                include_logprobs=return_logprobs,
            )
            state = self._compiled_prefill_fn(self._flattened_transformer_state, state, None, echo=False)
            state = self._compiled_decode_fn(self._flattened_transformer_state, state)
            completions = np.asarray(jax.device_get(state.token_buffer))[:, max_prompt_length:]
            # each completion ends before its first EOS id (or runs to the buffer's end), as Tunix's per-row search
            is_eos = np.isin(completions, self.eos_ids)
            ends = np.where(is_eos.any(axis=1), is_eos.argmax(axis=1), completions.shape[1])
            out_tokens = [row[:end] for row, end in zip(completions, ends.tolist(), strict=True)]
            logprobs = None
            if return_logprobs:  # each sampled token's, at its place in the token buffer (as Tunix slices them)
                buffer = np.asarray(jax.device_get(state.logprobs_buffer))[:, max_prompt_length:]
                logprobs = [row[:end].tolist() for row, end in zip(buffer, ends.tolist(), strict=True)]
            return base_sampler.SamplerOutput(
                text=[self.tokenizer.decode(t.tolist()) for t in out_tokens],
                logits=[],
                tokens=out_tokens,
                padded_prompt_tokens=prompt_ids,
                logprobs=logprobs,
            )

        # Tunix's __call__ stores the EOS ids as a device array, then finds where each completion ends with
        # numpy against it: np.isin over a jax.Array ran eager JAX comparisons for every row (~0.5-1 ms a step).
        # Held as a host array, the ids are the same and the search stays in numpy.
        @property
        def eos_ids(self) -> np.ndarray:
            return self._eos_ids

        @eos_ids.setter
        def eos_ids(self, value: Any) -> None:
            self._eos_ids = np.asarray(value)

        def tokenize(self, input_string: str) -> np.ndarray:
            ids = self._prompt_ids.get(input_string)
            if ids is None:
                if len(self._prompt_ids) >= 1 << 16:  # a bound for long runs over large datasets
                    self._prompt_ids.clear()
                ids = self._prompt_ids[input_string] = super().tokenize(input_string)
            return ids

        def _staged_init_state(self, all_input_ids: Any, seed: Any, **static: Any) -> Any:
            state = super().init_sample_state(all_input_ids, seed=seed, **static)
            # a static (non-pytree) field: it must leave the trace as a Python int
            return dataclasses.replace(state, num_input_tokens=int(all_input_ids.shape[1]))

        def init_sample_state(self, all_input_ids: Any, total_sampling_steps: int, **kwargs: Any) -> Any:
            seed = kwargs.pop("seed")  # Tunix's __call__ passes everything after the ids by keyword
            # num_input_tokens stays a Python int (Tunix stores a device array): it is a static field, so every
            # prefill and decode call compares it with the cached one, and an array compare syncs with the device
            return self._jitted_init_state(all_input_ids, seed, total_sampling_steps=total_sampling_steps, **kwargs)

    class LeanRollout(vanilla_rollout.VanillaRollout):
        """Constructed by RLCluster as a custom engine: (rollout_actor, tokenizer, mesh, rollout_config)."""

        def __init__(self, rollout_actor: Any, tokenizer: Any, mesh: Any, rollout_config: Any) -> None:
            c = rollout_actor.config
            self._sampler = LeanSampler(
                rollout_actor,
                tokenizer,
                sampler_lib.CacheConfig(
                    cache_size=rollout_config.kv_cache_size,
                    num_layers=c.num_layers,
                    num_kv_heads=c.num_kv_heads,
                    head_dim=c.head_dim,
                ),
            )

    assert issubclass(LeanRollout, base_rollout.BaseRollout)
    return LeanRollout


def recording_cluster_class() -> type:
    """Tunix's RLCluster, keeping the token count of each completion of this thread's last rollout: DAPO's
    overlong shaping counts tokens (reward functions see only text). Built on first use: Tunix is slow to import."""
    import threading

    from tunix.rl import rl_cluster as rl

    class RecordingCluster(rl.RLCluster):
        _lengths = threading.local()  # rollouts run in Tunix's data thread, evals in the training one
        _captured = threading.local()  # metrics buffered by a rollout sampled ahead (rlexp.tunix.ahead)

        # around each generation: the off-policy queue's turn (rlexp.train.off_policy, pipelined), else nothing
        gate: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext

        def generate(self, *args: Any, **kwargs: Any) -> Any:
            with self.gate():
                out = super().generate(*args, **kwargs)
            self._lengths.value = [len(ids) for ids in out.tokens]
            self._lengths.logprobs = out.logprobs  # per completion, as long as its tokens (RolloutConfig asks)
            return out

        def completion_lengths(self) -> list[int]:
            return self._lengths.value

        def rollout_logprobs(self) -> list | None:
            return getattr(self._lengths, "logprobs", None)

        def rollout_record(self) -> tuple[list[int] | None, list | None]:
            """(token counts, log-probabilities) of this thread's last rollout."""
            return getattr(self._lengths, "value", None), self.rollout_logprobs()

        def restore_rollout_record(self, record: tuple[list[int] | None, list | None]) -> None:
            """Make `record` this thread's last rollout (a batch sampled ahead, handed over to the trainer)."""
            self._lengths.value, self._lengths.logprobs = record

        def capture_metrics(self, sink: list | None) -> None:
            """While `sink` is a list, this thread's buffered metrics go to it as (metrics, mode) instead of the
            cluster's buffers (a rollout sampled ahead: they are buffered when its step trains); None: buffer."""
            self._captured.sink = sink

        def buffer_metrics(self, metrics: Any, mode: Any = rl.Mode.TRAIN) -> None:
            sink = getattr(self._captured, "sink", None)
            if sink is not None:
                sink.append((metrics, mode))
                return
            super().buffer_metrics(metrics, mode=mode)

        def buffer_metrics_async(self, metrics: Any, mode: Any = rl.Mode.TRAIN, step: int = 0) -> None:
            sink = getattr(self._captured, "sink", None)
            if sink is not None:
                sink.append((metrics, mode))
                return
            super().buffer_metrics_async(metrics, mode=mode, step=step)

    return RecordingCluster


def vanilla_rollout_engine() -> Any:
    """Tunix's own vanilla rollout (its `Sampler`), built from what a custom engine gets (rollout_actor,
    tokenizer, mesh, rollout_config) with the cache RLCluster gives it."""
    from tunix.rl.rollout import base_rollout, vanilla_rollout

    def build(rollout_actor: Any, tokenizer: Any, mesh: Any, rollout_config: Any) -> Any:
        c = rollout_actor.config
        cache = base_rollout.CacheConfig(
            cache_size=rollout_config.kv_cache_size,
            num_layers=c.num_layers,
            num_kv_heads=c.num_kv_heads,
            head_dim=c.head_dim,
        )
        return vanilla_rollout.VanillaRollout(rollout_actor, tokenizer, cache_config_or_size=cache)

    return build


def qualified_name(obj: Any) -> str:
    """`module.Class` of `obj`'s class; rlexp's classes built inside a function show their Tunix base too."""
    cls = type(obj)
    name = f"{cls.__module__}.{cls.__qualname__}".replace(".<locals>.", ".")
    if cls.__module__.startswith("rlexp."):
        base = next((b for b in cls.__mro__[1:] if b.__module__.split(".")[0] == "tunix"), None)
        if base is not None:
            name += f"({base.__module__}.{base.__qualname__})"
    return name


def rollout_classes(rollout: Any) -> dict[str, str]:
    """The classes of a rollout engine and of its sampler."""
    out = {"rollout": qualified_name(rollout)}
    sampler = getattr(rollout, "_sampler", None)  # Tunix's vanilla, vLLM and SGLang rollouts keep theirs here
    if sampler is not None:
        out["sampler"] = qualified_name(sampler)
    return out


def ran_classes(cluster: Any, learner: Any) -> dict[str, str]:
    """The classes of the sampler, rollout, learner and cluster a run trained with."""
    out = {"cluster": qualified_name(cluster), "learner": qualified_name(learner), **rollout_classes(cluster.rollout)}
    return dict(sorted(out.items()))


def eval_rollout_engine(conf: RlexpConfig) -> Any:
    """The rollout `rlexp eval` samples with: the lean one when `perf.patches` names it, else Tunix's own."""
    return lean_rollout_engine() if uses_lean_sampler(conf) else vanilla_rollout_engine()
