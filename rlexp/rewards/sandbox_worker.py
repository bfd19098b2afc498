"""The jobs that run inside the sandbox, each in a fresh forked child of the warm worker (`sandbox_serve`).

Standard library only: this file's text, then `sandbox_serve`'s, run as `python -I -c <text> <settings JSON>`, so
it needs nothing from the working tree (which the sandbox hides). The call's child sets the resource limits
(RLIMIT_AS, RLIMIT_CPU, RLIMIT_NPROC, RLIMIT_FSIZE, no core files, no POSIX message queues), then `run(job)`.

Job kinds:
  evaluate  `source` defines evaluate(example, response) -> float; items run in forked children of the call
  tests     per item, `code` is run and then each of `tests` (assert statements); value = share passed
  python    a user function (`source` of a file, or `spec` module:function to import), `call` batch or item
  exec      per item, `code` is run; its output is what it prints (the `python` tool of rlexp.tools)
  env       a user's environment class (`spec` module:Class or file.py:Class, TRL's environment_factory shape):
            `op: describe` returns its tools (public methods: name, docstring, parameters); `op: run` replays,
            per item, reset(**row), the item's tool calls in order and, with `reward`, get_reward()
Answer: {"values": [float | null], "errors": [str | null]} or {"error": str, "fatal": bool} when the job
cannot start (the snippet does not parse, defines no evaluate, ...).
The text of rlexp.children.die_with_parent runs before this file's (the worker dies with rlexp); each forked
child calls it too. Item children (evaluate, tests) get `item_timeout_s` per item, run at most `parallel` at a
time, and a child's crash, limit or timeout costs only its item: for `tests` the tests passed before it count, the
rest fail. An `evaluate` child scores item after item (one fork per child, not per item: the user's grader is
set up once per call) until one fails, then a fresh fork of the set-up call takes the rest; each `tests` item (a
completion's own code) gets a child of its own, as nothing of one completion may reach another's tests.
"""

import json
import os
import resource
import select
import signal
import time
import traceback

if "die_with_parent" not in globals():  # imported as a module, not run after rlexp.children's prelude

    def die_with_parent(parent=0, sig=9):
        pass


_ITEM_BYTES = 1 << 20  # bytes of one item's lines kept


def _limits(lim, sandboxed):
    mb = 1 << 20
    pairs = [(resource.RLIMIT_CORE, 0)]
    if sandboxed and hasattr(resource, "RLIMIT_MSGQUEUE"):
        pairs.append((resource.RLIMIT_MSGQUEUE, 0))  # POSIX queues outlive a call and cannot be listed: none
    if lim.get("memory_mb"):
        pairs.append((resource.RLIMIT_AS, int(lim["memory_mb"] * mb)))
    if lim.get("cpu_s"):
        pairs.append((resource.RLIMIT_CPU, int(lim["cpu_s"])))
    if lim.get("nproc"):
        pairs.append((resource.RLIMIT_NPROC, int(lim["nproc"])))
    if lim.get("fsize_mb"):
        pairs.append((resource.RLIMIT_FSIZE, int(lim["fsize_mb"] * mb)))
    for which, value in pairs:  # CPU: SIGXCPU at the soft limit, SIGKILL a second later
        resource.setrlimit(which, (value, value + (which == resource.RLIMIT_CPU)))


def _err(exc):
    return (type(exc).__name__ + ": " + str(exc))[:500]


def _where(exc):
    """Where the user's code raised, `(file.py line 3, in fn)`: one line, not a traceback (nothing when this
    worker, run from a string, raised itself)."""
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames or frames[-1].filename == "<string>":
        return ""
    f = frames[-1]
    return f" ({os.path.basename(f.filename)} line {f.lineno}, in {f.name})"


def _compile_module(source, filename):
    ns = {"__name__": "__rlexp_user__", "__file__": filename}
    exec(compile(source, filename, "exec"), ns)
    return ns


def _item(kind, target, item, emit):
    """One item in an item child: JSON lines through `emit`."""
    try:
        if kind == "evaluate":
            emit({"value": target(item["example"], item["response"]), "error": None})
        else:
            ns = {"__name__": "__main__"}
            exec(compile(item["code"], "<completion>", "exec"), ns)
            for test in item["tests"]:
                try:
                    exec(compile(test, "<test>", "exec"), ns)
                    emit({"test": True})
                except Exception:  # noqa: BLE001 - a failing test is a score, not an error
                    emit({"test": False})
            emit({"done": True})
    except BaseException as exc:  # noqa: BLE001
        emit({"value": None if kind == "evaluate" else 0.0, "error": _err(exc)})


def _item_child(kind, target, items, cmd, out):
    """Score the items whose indices (4 bytes each) arrive on `cmd`, until it closes."""
    me = os.getpid()

    def emit(obj):
        if os.getpid() != me:  # a fork made by the user's code does not speak for this child
            os._exit(0)
        os.write(out, (json.dumps(obj) + "\n").encode())

    while True:
        raw = b""
        while len(raw) < 4:
            chunk = os.read(cmd, 4 - len(raw))
            if not chunk:
                os._exit(0)
            raw += chunk
        _item(kind, target, items[int.from_bytes(raw, "big")], emit)
        if os.getpid() != me:
            os._exit(0)


def _finish(kind, item, lines, reason):
    final = [x for x in lines if "value" in x]
    if kind == "tests":
        total = len(item["tests"]) or 1
        if final:  # the completion's own code failed before any test
            return 0.0, None
        passed = sum(1 for x in lines if x.get("test"))
        return passed / total, None  # tests not reached (timeout, crash, limit) count as failed
    if final:
        return final[-1]["value"], final[-1]["error"]
    return None, reason or "the evaluation ended without a value"


def _done(kind, obj):
    return "value" in obj or (kind == "tests" and obj.get("done"))


def _kill(pid):
    for kill in (os.killpg, os.kill):
        try:
            kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _forked(kind, target, items, lim):
    values, errors = [None] * len(items), [None] * len(items)
    pending = list(range(len(items)))
    children = {}  # read fd -> {"pid", "cmd", "pidfd", "queue" (indices sent, head running), "deadline", ...}
    parallel = max(1, int(lim.get("parallel") or 1))
    item_timeout = float(lim.get("item_timeout_s") or 10.0)
    reuse = kind == "evaluate"  # the user's grader keeps its child; a completion's code gets a fresh one
    depth = 4 if reuse else 1  # indices sent ahead, so a child does not wait on this process between items
    caller = os.getpid()

    def feed(c):
        while pending and len(c["queue"]) < depth and c["cmd"] is not None:
            i = pending.pop(0)
            if not c["queue"]:
                c["deadline"] = time.monotonic() + item_timeout
            c["queue"].append(i)
            try:
                os.write(c["cmd"], i.to_bytes(4, "big"))
            except OSError:
                break
        if c["cmd"] is not None and (not reuse or not pending):
            os.close(c["cmd"])  # no more items for it: it exits after its queue
            c["cmd"] = None

    def drain(fd, c, now):
        """Read what the child wrote (its lines finish items); True at end of file."""
        while True:
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                return False
            if not chunk:
                return True
            c["buf"] += chunk
            *whole, c["buf"] = c["buf"].split(b"\n")
            for line in whole:
                c["size"] += len(line)
                if not c["queue"] or c["size"] > _ITEM_BYTES or not line.strip().startswith(b"{"):
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                c["lines"].append(obj)
                if isinstance(obj, dict) and _done(kind, obj):
                    i = c["queue"].pop(0)
                    values[i], errors[i] = _finish(kind, items[i], c["lines"], None)
                    c["lines"], c["size"] = [], 0
                    c["deadline"] = now + item_timeout  # the next item's, or the time it has to exit
                    feed(c)

    while pending or children:
        while pending and len(children) < parallel:
            r, w = os.pipe()
            cr, cw = os.pipe()
            try:
                pid = os.fork()
            except OSError as exc:
                for fd in (r, w, cr, cw):
                    os.close(fd)
                i = pending.pop(0)
                errors[i] = "cannot fork: " + _err(exc)
                continue
            if pid == 0:
                os.close(r)
                os.close(cw)
                for other in children.values():
                    if other["cmd"] is not None:
                        os.close(other["cmd"])
                os.setpgid(0, 0)
                die_with_parent(caller)  # in its own group: the killpg of a sibling misses it
                _item_child(kind, target, items, cr, w)
            os.close(w)
            os.close(cr)
            os.set_blocking(r, False)
            try:
                pidfd = os.pidfd_open(pid)  # readable when it exits, even if what it started holds its pipe
            except (AttributeError, OSError):
                pidfd = None
            c = {"pid": pid, "cmd": cw, "pidfd": pidfd, "queue": [], "deadline": 0.0, "buf": b"", "lines": []}
            c["size"] = 0
            children[r] = c
            feed(c)
        if not children:
            continue
        pidfds = [c["pidfd"] for c in children.values() if c["pidfd"] is not None]
        wait = max(0.0, min(c["deadline"] for c in children.values()) - time.monotonic())
        if len(pidfds) < len(children):
            wait = min(wait, 0.05)  # no pidfd (an old kernel): look for ended children this often
        ready, _, _ = select.select(list(children) + pidfds, [], [], wait)
        now = time.monotonic()
        for fd in list(children):
            c = children[fd]
            exited = c["pidfd"] in ready if c["pidfd"] is not None else False
            eof = (fd in ready or exited) and drain(fd, c, now)
            if not (eof or exited) and now < c["deadline"]:
                continue
            # it ended (EOF, or it exited while something it started holds its pipe), or its head item ran past
            # its deadline (or, its items done, it did not exit)
            reason, killed = (None, False) if eof or exited else (f"timed out after {item_timeout:g}s", True)
            pid, status = 0, 0
            for _ in range(0 if killed else 100):  # ending: a crash's signal is its error
                pid, status = os.waitpid(c["pid"], os.WNOHANG)
                if pid:
                    break
                time.sleep(0.001)
            if not pid:  # still running: past its deadline, or it closed its pipe
                killed = True
                _kill(c["pid"])
                _, status = os.waitpid(c["pid"], 0)
            _kill(c["pid"])  # whatever it started in its group
            if reason is None and not killed and os.WIFSIGNALED(status):
                sig = os.WTERMSIG(status)
                reason = f"killed by signal {sig}{' (CPU limit)' if sig == signal.SIGXCPU else ''}"
            for own in (fd, c["cmd"], c["pidfd"]):
                if own is not None:
                    os.close(own)
            del children[fd]
            if c["queue"]:  # its head item failed; the ones sent after it go to a fresh child
                i = c["queue"].pop(0)
                values[i], errors[i] = _finish(kind, items[i], c["lines"], reason)
                pending[:0] = c["queue"]
    return values, errors


def _python(job):
    if job.get("source") is not None:
        ns = _compile_module(job["source"], job.get("filename") or "<reward>")
        fn = ns.get(job["function"])
    else:
        import importlib
        import importlib.util

        target, _, name = job["spec"].rpartition(":")
        try:
            if target.endswith(".py"):
                spec = importlib.util.spec_from_file_location("rlexp_user_reward", target)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                module = importlib.import_module(target)
        except (ImportError, OSError) as exc:
            raise _Fatal(f"cannot import {target}: {exc}") from None
        fn = getattr(module, name, None)
    if not callable(fn):
        what = "class" if job["kind"] == "env" else "function"
        raise _Fatal("{} defines no {} {}".format(job.get("filename") or job.get("spec"), what, job["function"]))
    return fn


def _exec(code):
    """What `code` prints, or its error's last line: a tool's answer to the model."""
    import contextlib
    import io

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<tool>", "exec"), {"__name__": "__main__"})
    except BaseException as exc:  # noqa: BLE001 - the model's code failing is an answer, not a crash
        return out.getvalue()[-2000:] + _err(exc)
    return out.getvalue()[-2000:]


class _Fatal(Exception):
    """The job cannot start, and would not on a second try."""


_JSON = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}


def _env_tools(cls):
    """The class's tools: each public method but reset and get_reward, with its docstring and parameters."""
    import inspect

    if not callable(getattr(cls, "reset", None)):
        raise _Fatal(f"{cls.__name__} has no reset(**row) method; an environment class starts episodes with it")
    if not callable(getattr(cls, "get_reward", None)):
        raise _Fatal(f"{cls.__name__} has no get_reward() method; an environment class scores episodes with it")
    tools = []
    for name, fn in inspect.getmembers(cls, inspect.isfunction):
        if name.startswith("_") or name in ("reset", "get_reward"):
            continue
        doc = inspect.getdoc(fn)
        if not doc:
            raise _Fatal(f"tool method {cls.__name__}.{name} has no docstring; the model is told what it does from it")
        params = [p for p in inspect.signature(fn).parameters.values() if p.name != "self"]
        props = {p.name: {"type": _JSON.get(p.annotation, "string")} for p in params}
        for line in doc.splitlines():  # Google style "name: what it is" lines under Args:
            key, _, text = line.strip().partition(":")
            if key.split(" ")[0] in props and text:
                props[key.split(" ")[0]]["description"] = text.strip()
        required = [p.name for p in params if p.default is inspect.Parameter.empty]
        tools.append(
            {
                "name": name,
                "description": doc.split("\n\n")[0],
                "parameters": {"type": "object", "properties": props, "required": required},
            }
        )
    return tools


def _env(job, cls):
    if job.get("op") == "describe":
        return {"values": [], "tools": _env_tools(cls)}
    values, errors, outputs, observations = [], [], [], []
    for it in job.get("items") or []:
        try:
            env = cls()
            obs = env.reset(**(it.get("row") or {}))
            outs = []
            for name, args in it.get("calls") or []:
                try:
                    outs.append(str(getattr(env, name)(**args)))
                except Exception as exc:  # noqa: BLE001 - the model's bad call is its observation
                    outs.append("error: " + _err(exc))
            value = env.get_reward() if job.get("reward") else 0.0
            values.append(value)
            errors.append(None)
        except Exception as exc:  # noqa: BLE001 - one episode's failure is its own errored value
            obs, outs = None, []
            values.append(None)
            errors.append(_err(exc))
        observations.append(None if obs is None else str(obs))
        outputs.append(outs)
    return {"values": values, "errors": errors, "outputs": outputs, "observations": observations}


def run(job):
    kind, items, lim = job["kind"], job.get("items") or [], job.get("limits") or {}
    try:
        if kind == "evaluate":
            target = _compile_module(job["source"], job.get("filename") or "<snippet>").get("evaluate")
            if not callable(target):
                return {"error": "the snippet defines no function evaluate(example, response)", "fatal": True}
        elif kind in ("python", "env"):
            target = _python(job)
        else:
            target = None
    except SyntaxError as exc:
        return {"error": f"SyntaxError: {exc.msg} (line {exc.lineno})", "fatal": True}
    except _Fatal as exc:
        return {"error": str(exc), "fatal": True}
    except BaseException as exc:  # noqa: BLE001 - module-level code of the user's snippet
        return {"error": "setting up the reward failed: " + _err(exc), "fatal": False}
    if job.get("check_only"):
        return {"values": [], "errors": []}
    if kind == "env":
        return _env(job, target)
    if kind == "exec":
        return {"values": [], "outputs": [_exec(it["code"]) for it in items]}
    if kind in ("evaluate", "tests"):
        values, errors = _forked(kind, target, items, lim)
    elif job.get("call") == "item":
        values, errors = [], []
        for it in items:
            try:
                values.append(target(**it, **(job.get("kwargs") or {})))
                errors.append(None)
            except Exception as exc:  # noqa: BLE001 - one failing item must not void the batch
                values.append(None)
                errors.append(_err(exc))
    else:
        b = job["batch"]
        out = target(b["prompts"], b["completions"], **b["fields"], **(job.get("kwargs") or {}))
        if isinstance(out, (str, bytes, dict)) or not hasattr(out, "__len__"):
            raise TypeError(f"returned {type(out).__name__} {repr(out)[:60]}, not a list of one number per completion")
        values = list(out)
        errors = [None] * len(values)
    clean = []
    for i, v in enumerate(values):
        try:
            v = v if v is None or isinstance(v, (str, bytes, bool)) else float(v)  # numpy scalars too
        except (TypeError, ValueError):
            pass
        if v is not None and not isinstance(v, float):
            if i < len(errors) and errors[i] is None:
                errors[i] = f"returned {type(v).__name__} {repr(v)[:80]} where a number belongs"
            v = None
        clean.append(None if v is None or v != v or v in (float("inf"), float("-inf")) else float(v))
    return {"values": clean, "errors": errors}
