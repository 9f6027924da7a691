"""What every script shares: quiet TensorFlow start-up and one-line errors.

Import this module first. A script imports no TensorFlow at module level: it defines its
flags (choices from `electra_tf.choices`) and imports the library in its main, so that absl
refuses a bad or missing flag, or prints --help, before TensorFlow's ~5 s start-up.

On a machine without an NVIDIA GPU, the CUDA build of TensorFlow logs a "failed call to
cuInit" error at import; with nothing useful to say there, its C++ logging is silenced so
that an error we print is the only line. Set TF_CPP_MIN_LOG_LEVEL yourself to override (0
also shows XLA's first log lines, below).
"""

import gc
import logging as python_logging
import os
import re
import signal
import sys
import threading
import time

_QUIET = "TF_CPP_MIN_LOG_LEVEL" not in os.environ
if _QUIET:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2" if os.path.exists("/dev/nvidiactl") else "3"
# INFO lines hidden (by us or by the user's own setting): XLA's first ones are taken too.
_HIDE_INFO = os.environ["TF_CPP_MIN_LOG_LEVEL"].strip() not in ("", "0")

from absl import app  # noqa: E402

from electra_tf.errors import (  # noqa: E402
    UserInputError, lost_worker, out_of_memory, path_failure, storage_failure, storage_message)
from electra_tf.training import signals  # noqa: E402  (the standard library's only)


# The program of the process that filters stderr during _absorb_first_xla_log: it drops
# XLA's two first log lines, passes every other line, and stops after a fatal log line
# (absl's "F0000 ..." or TensorFlow's "<date> <time>: F ..."), dropping what follows it:
# Python's crash dump of the abort, which says no more.
_DROP_XLA_FIRST_LINES = r"""
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's; this ends at EOF
drop = (b"WARNING: All log messages before absl::InitializeLog()",
        b"] Compiled cluster using XLA!")
fatal = re.compile(rb"^(F\d{4} \d\d:\d\d:\d\d|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: F )")
for line in sys.stdin.buffer:
    if not any(d in line for d in drop):
        sys.stdout.buffer.write(line)
        sys.stdout.buffer.flush()
    if fatal.match(line):
        sys.stdin.buffer.read()
        break
"""


def _absorb_first_xla_log():
    """Compile one trivial XLA function with the process's stderr filtered.

    XLA logs "Compiled cluster using XLA!" at its first compilation, through absl logging,
    which TF_CPP_MIN_LOG_LEVEL does not reach, preceded by absl's warning that logging was
    never initialised: two lines in every training run (training compiles small XLA
    functions even on a CPU, `layers.xla_elementwise`). Both are printed once per process,
    so a first compilation here, on the CPU, with file descriptor 2 piped through a small
    process that drops exactly those two lines, takes them. Everything else passes: above
    all XLA's fatal line for a bad XLA_FLAGS (parsed at this first compilation), which it
    prints just before aborting the process, so that only a filter outside the process can
    still forward it. It starts TensorFlow's runtime, so not under
    --strategy=multi_worker_mirrored, whose collective ops must be configured before that,
    nor --strategy=tpu, which connects to the TPU system first. (The program lands in the
    XLA compilation cache's scratch directory, if one is staged; `xla_cache.attach` leaves it
    out of the model dir.)
    """
    from absl import flags
    if "strategy" in flags.FLAGS and flags.FLAGS.strategy in ("multi_worker_mirrored", "tpu"):
        return
    import subprocess

    from electra_tf.modeling.layers import xla_compiles_for_cpu
    sys.stderr.flush()
    saved = os.dup(2)
    try:  # -I: no user site, no PYTHON* variables, not the working directory on sys.path
        drop = subprocess.Popen([sys.executable, "-I", "-S", "-c", _DROP_XLA_FIRST_LINES],
                                stdin=subprocess.PIPE, stdout=saved)
    except BaseException:
        os.close(saved)
        raise
    try:
        os.dup2(drop.stdin.fileno(), 2)
        xla_compiles_for_cpu()  # (False in the tensorflow-tpu build: nothing to absorb)
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        drop.stdin.close()
        drop.wait()


def mark_required(names, lists=()):
    """absl's mark_flags_as_required, and an empty value refused too (`run`, in one line): a
    path flag given as `--model_dir=$DIR` with DIR unset would otherwise be the current
    directory (an export there, a run writing into the checkout). `lists`: those of them
    that are comma-separated lists of paths, kept as one string (absl's list flags split at
    a file name's commas too, "Smith, John.txt"), whose empty item is refused as a list
    flag's is."""
    from absl import flags
    flags.mark_flags_as_required(names)
    for name in names:
        flags.FLAGS[name].electra_nonempty = True  # (on this script's flag object only)
    for name in lists:
        flags.FLAGS[name].electra_list = True


def _empty_required_flag() -> str | None:
    """The error for the first flag marked by mark_required that was given an empty value
    (or an empty item of a list: a stray comma), else None."""
    from absl import flags
    for name in flags.FLAGS:
        flag = flags.FLAGS[name]
        if not getattr(flag, "electra_nonempty", False):
            continue
        values = flag.value if isinstance(flag.value, list) else [flag.value]
        if (getattr(flag, "electra_list", False) and isinstance(flag.value, str)
                and not os.path.exists(flag.value.strip())):  # (not a name with commas)
            values = flag.value.split(",")
        blank = [isinstance(v, str) and not v.strip() for v in values]
        if any(blank) and not all(blank):  # "--input=a.txt," or "a.txt,,b.txt"
            return (f"--{name} has an empty item (a comma with nothing after it, or two "
                    "together?); pass the items without it")
        # (a list flag given as "--input=" is [])
        if not values or any(blank):
            return f"--{name} is empty (is a shell variable in it unset?); pass it a value"
    return None


def _expand_home():
    """`--model_dir=~/runs/x`: the shell leaves a `~` after `=` as it is (bash expands it only
    in variable assignments), and the run would write into a folder named `~` in the working
    directory; every flag's value that starts with `~/`, and each such path of a
    comma-separated list (a list flag's items too; not --gin_bindings, which are gin's), is
    expanded as the shell would expand `~/runs/x`."""
    from absl import flags

    def expand(value):  # each of a comma-separated list's paths too
        if not isinstance(value, str) or "~" not in value:
            return value
        return ",".join(os.path.expanduser(v) if v == "~" or v.startswith("~/") else v
                        for v in value.split(","))
    for name in flags.FLAGS:
        flag = flags.FLAGS[name]
        if name == "gin_bindings" or flag.value is None:
            continue
        if isinstance(flag.value, list):
            expanded = [expand(v) for v in flag.value]
        else:
            expanded = expand(flag.value)
        if expanded != flag.value:
            flag.value = expanded


def _flag_choosing(path: str | None) -> str | None:
    """The flag whose folder or file holds `path` (the nearest: --model_dir, --output_dir,
    ...), for a message on a write there that failed."""
    from absl import flags
    if not path or "://" in path:
        return None
    target, best = os.path.abspath(path), (0, None)
    for name in flags.FLAGS:
        value = flags.FLAGS[name].value
        if not isinstance(value, str) or not value.strip() or "://" in value:
            continue
        folder = os.path.abspath(value)
        if (target == folder or target.startswith(folder.rstrip("/") + "/")) and (
                len(folder) > best[0]):
            best = (len(folder), f"--{name}")
    return best[1]


class Terminated(BaseException):
    """SIGTERM, raised where the main thread is (as Ctrl-C raises KeyboardInterrupt), so that
    what a script is writing is cleaned up and it ends with one line (`run`'s
    handles_sigterm). A pre-training run's loop handles SIGTERM itself (it saves a
    checkpoint first); this answers it during the run's start-up."""


TERMINATED_LINE = ("terminated (SIGTERM); what was complete is kept: rerun the same command "
                   "to go on")
# A script that keeps nothing partial (a vocab, an export): its rerun starts over.
TERMINATED_NOTHING_WRITTEN = ("terminated (SIGTERM); nothing was written: rerun the command "
                              "to start again")
TERMINATED_EXIT_CODE = 143  # 128 + SIGTERM


class _SigtermWatch:
    """SIGTERM as Terminated in the main thread (once: a second one during the clean-up is
    left to the thread), and, where that thread does not take it within GRACE_SECONDS (it
    is inside one long TensorFlow call, an XLA compilation say), the same line and exit
    code from a thread that waits on the signal module's wakeup descriptor, to which
    CPython's C-level handler writes each signal as it arrives. That exit skips the main
    thread's clean-up, which leaves only what a kill -9 would: staging files a rerun
    removes (as does a Terminated that Python swallowed: `_Unraisable`). `start` and
    `close` are where the handler is put in and taken out; while it closes, a SIGTERM
    raises nothing."""

    GRACE_SECONDS = 5.0

    def __init__(self, line: str = TERMINATED_LINE):
        self.line = line
        self.taken = threading.Event()
        self._closing = False
        self._stderr = None  # sys.stderr while muted
        self._pipe = self._thread = self._handler = self._previous_fd = None

    def start(self):
        self._pipe = signals.wakeup_pipe()
        self._thread = threading.Thread(target=self._watch, name="electra-sigterm",
                                        daemon=True)
        self._thread.start()
        self._previous_fd = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        self._handler = signal.signal(signal.SIGTERM, self._raise)

    def reclaim(self):
        """Puts the handler back where TensorFlow took SIGTERM for itself (a
        MultiWorkerMirroredStrategy's preemption watcher does, once it is made)."""
        if self._handler is not None and not self._closing:
            signal.signal(signal.SIGTERM, self._raise)
            signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)

    def _raise(self, number, frame):
        if self._closing or self.taken.is_set():
            return
        self.taken.set()
        # From here the script ends with the one line: TensorFlow's C++ code the exception
        # interrupts may print a traceback of it on its way out (PyErr_Print, to
        # sys.stderr: "SystemError: <built-in function __import__> returned a result with
        # an exception set", seen when an export was stopped).
        self._stderr, sys.stderr = sys.stderr, open(os.devnull, "w")
        raise Terminated

    def unmute(self):
        """sys.stderr back, as it was before the SIGTERM muted it."""
        if self._stderr is not None:
            muted, sys.stderr, self._stderr = sys.stderr, self._stderr, None
            muted.close()

    def _watch(self):
        import select
        poller = select.poll()
        poller.register(self._pipe[0], select.POLLIN)
        seen = 0  # SIGTERMs
        while True:
            poller.poll()
            try:
                numbers = os.read(self._pipe[0], 256)
            except BlockingIOError:
                continue
            if 0 in numbers:  # `close`: no signal has number 0
                return
            for number in numbers:
                if number != signal.SIGTERM:
                    signals.pass_on(number, self._previous_fd)
            if signal.SIGTERM not in numbers:
                continue
            # The first, unless the main thread takes it (it may have already); a later
            # one (the clean-up is stuck) once the grace period is over.
            seen += numbers.count(signal.SIGTERM)
            if seen > 1:
                time.sleep(self.GRACE_SECONDS)
            elif self.taken.wait(self.GRACE_SECONDS):
                continue
            signals.exit_now(self.line, TERMINATED_EXIT_CODE)

    def close(self):
        self._closing = True
        if self._handler is not None:
            signal.signal(signal.SIGTERM, self._handler)
            signal.set_wakeup_fd(self._previous_fd)
        if self._thread is not None:
            os.write(self._pipe[1], b"\0")
            self._thread.join(timeout=10)
            if not self._thread.is_alive():
                for end in self._pipe:
                    os.close(end)


class _Unraisable:
    """sys.unraisablehook while a script runs. A signal's exception (KeyboardInterrupt,
    Terminated) raised where the signal found the main thread inside a `__del__` or a weakref
    callback (garbage collection runs them anywhere; TensorFlow and Keras objects have them)
    cannot reach the script: Python reports it here and goes on. So Ctrl-C printed a
    traceback ("Exception ignored in ...") and was ignored, and SIGTERM, with stderr muted,
    let the script run to its end with exit code 0 (seen once in pre-training's start-up
    test). Such a signal ends the script here with its one line and exit code, as the
    SIGTERM watcher's exit does (the clean-up skipped: what a kill -9 leaves); anything else
    goes to the hook before ours."""

    def __init__(self, previous, terminated_line: str = TERMINATED_LINE):
        self.previous = previous
        self.terminated_line = terminated_line

    def __call__(self, unraisable):
        if isinstance(unraisable.exc_value, KeyboardInterrupt):
            signals.exit_now(signals.INTERRUPTED_LINE, signals.INTERRUPTED_EXIT_CODE)
        if isinstance(unraisable.exc_value, Terminated):
            signals.exit_now(self.terminated_line, TERMINATED_EXIT_CODE)
        self.previous(unraisable)


_WATCH: _SigtermWatch | None = None  # the running script's, for `reclaim_sigterm`


def reclaim_sigterm():
    """A script that handles SIGTERM calls this after making a multi-worker strategy, whose
    preemption watcher takes SIGTERM (a worker then ignored `kill`)."""
    if _WATCH is not None:
        _WATCH.reclaim()


def stray_argument(argv: list[str], raw: list[str]) -> str | None:
    """The refusal of a word left after the flags (`argv[1:]`, absl's remainder; `raw`, the
    command line) for a script that takes only flags, or None: a stray word was ignored,
    and `--lower_case false` (absl reads `--lower_case`, true, and a stray 'false') did the
    opposite of what it says."""
    if len(argv) < 2:
        return None
    from absl import flags
    stray = argv[1]

    def boolean(word):  # a boolean flag given without a value
        name = word[2:] if word.startswith("--") and "=" not in word else None
        return name in flags.FLAGS and flags.FLAGS[name].boolean

    # (the stray word's place: the occurrence after a boolean flag, where one is)
    after = [i for i, word in enumerate(raw) if word == stray and i and boolean(raw[i - 1])]
    if after and stray.lower() in ("true", "false", "yes", "no", "0", "1"):
        before = raw[after[0] - 1]
        return (f"'{before} {stray}' reads as {before} and a stray word '{stray}'; write "
                f"{before}={stray.lower()}")
    return (f"{stray!r} is not a flag and this script takes only flags; write each as "
            "--name=value")


def run(main, trains: bool = False, xla_cache: bool = False, memory_hint: str | None = None,
        handles_sigterm: bool = False, positional: bool = False,
        terminated_line: str = TERMINATED_LINE):
    """absl's app.run, with UserInputError printed as one line on stderr and exit code 1.

    Library INFO logging (absl, TensorFlow) is off unless --verbosity is given: the scripts
    print what a user needs. `trains`: the script trains (it compiles XLA functions), so
    XLA's first log lines are taken at start-up (`_absorb_first_xla_log`) and a bad
    ELECTRA_TF_XLA_ELEMENTWISE fails there; the others do not pay for that compilation.
    `memory_hint`: what to lower when the device runs out of memory (TensorFlow's error, with
    its traceback, is one line too). `xla_cache`: stage the XLA compilation cache
    (`training/xla_cache.py`) before app.run: once absl has parsed the flags, an imported
    TensorFlow lists its devices, which reads TF_XLA_FLAGS. `handles_sigterm`: SIGTERM
    raises Terminated, printed as one line (exit 143) once what was being written is cleaned
    up; for a script whose main thread is back in Python often (the data builder waits on
    its workers; fine-tuning steps and predicts a batch at a time): a handler runs only
    between TensorFlow calls, so a main thread inside a long one is not waited for
    (`_SigtermWatch`). `positional`: the script reads words after its flags (else one is
    refused: `stray_argument`). `terminated_line`: the SIGTERM line; TERMINATED_NOTHING_WRITTEN
    for a script that keeps nothing partial.
    """
    if xla_cache:
        from electra_tf.training import xla_scratch
        xla_scratch.stage()

    def guarded(argv):
        from absl import flags, logging
        global _WATCH
        sigterm = None
        if handles_sigterm and threading.current_thread() is threading.main_thread():
            sigterm = _WATCH = _SigtermWatch(terminated_line)
        if not flags.FLAGS["verbosity"].present:
            logging.set_verbosity(logging.WARNING)
            # tf.get_logger(), which TensorFlow leaves at this level when it is imported
            python_logging.getLogger("tensorflow").setLevel(python_logging.WARNING)
        # (process-wide: only where signals reach, the main thread)
        unraisable = None
        if threading.current_thread() is threading.main_thread():
            unraisable = sys.unraisablehook = _Unraisable(sys.unraisablehook, terminated_line)
        try:
            if sigterm is not None:
                sigterm.start()
            stray = None if positional else stray_argument(argv, sys.argv)
            if stray:
                raise UserInputError(stray)
            _expand_home()
            empty = _empty_required_flag()
            if empty:
                raise UserInputError(empty)
            if trains and _HIDE_INFO:
                _absorb_first_xla_log()
            if trains:
                from electra_tf.modeling.layers import xla_elementwise_setting
                xla_elementwise_setting()  # a bad ELECTRA_TF_XLA_ELEMENTWISE fails here
            return main(argv)
        except UserInputError as e:
            # gin appends "In call to configurable ..." lines; the first line is the message.
            print(f"error: {str(e).splitlines()[0]}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            # Ctrl-C: one line, not a traceback; every output is written atomically, so what
            # was complete is kept (a run, a build or fine-tuning resumes when rerun).
            print(signals.INTERRUPTED_LINE, file=sys.stderr)
            return signals.INTERRUPTED_EXIT_CODE
        except Terminated:  # `kill`, a scheduler's stop: the same, where it died silently
            if sigterm is not None:
                sigterm.unmute()
            print(terminated_line, file=sys.stderr)
            return TERMINATED_EXIT_CODE
        except BrokenPipeError:
            # Whoever read stdout closed it (`| head`): stop as the shell's tools do (killed
            # by SIGPIPE: 128 + 13), without a traceback, and send what is still buffered
            # nowhere so the interpreter's exit does not fail on it again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
        except Exception as e:  # a write the disk refused, memory, a lost worker: one line
            if sigterm is not None and sigterm.taken.is_set():
                # The Terminated raised into the main thread came back as another error:
                # the code it interrupted (TensorFlow's, say) raised its own in its place.
                sigterm.unmute()
                print(terminated_line, file=sys.stderr)
                return TERMINATED_EXIT_CODE
            failure, memory, peer = storage_failure(e), out_of_memory(e), lost_worker(e)
            unreachable = path_failure(e)
            if failure:
                reason, path = failure
                print(f"error: {storage_message(reason, path, _flag_choosing(path))}",
                      file=sys.stderr)
            elif memory:
                print(f"error: out of memory allocating {memory}; "
                      f"{memory_hint or 'make the batch smaller'}", file=sys.stderr)
            elif unreachable:
                print(f"error: {unreachable}", file=sys.stderr)
            elif peer:  # another worker died or cannot be reached
                print(f"error: lost contact with another worker of the cluster ({peer}); what "
                      "was saved is kept: rerun the command on every worker", file=sys.stderr)
            else:
                raise
            return 1
        finally:
            if sigterm is not None:
                sigterm.unmute()
                sigterm.close()
                _WATCH = None
            if unraisable is not None and sys.unraisablehook is unraisable:
                sys.unraisablehook = unraisable.previous
            # Exit without the interpreter's final garbage collection: it walks every
            # traced graph and Keras object (2 s after a tiny pre-training run, more under
            # load) only to free memory the process is giving back anyway. Every output is
            # flushed and closed by now (files through context managers, TensorBoard
            # writers after each write); atexit handlers still run.
            gc.freeze()

    app.run(guarded, flags_parser=parse_flags)


_REQUIRED = re.compile(r"flag --(\w+)=None: Flag --\1 must have a value other than None\.?")


def parse_flags(argv: list[str]) -> list[str]:
    """absl's parsing, with a refusal as one `error:` line (exit code 1), as every other
    refusal is: absl printed 'FATAL Flags parsing error: ...' and a second line."""
    from absl import flags
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        message = " ".join(str(e).split())
        required = _REQUIRED.findall(message)
        if required and not _REQUIRED.sub("", message).strip():  # (absl lists each)
            names = [f"--{name}" for name in required]
            message = (f"{names[0]} is required; pass it" if len(names) == 1 else
                       f"{', '.join(names[:-1])} and {names[-1]} are required; pass them")
        print(f"error: {message} (--helpshort lists the flags)", file=sys.stderr)
        sys.exit(1)
    except SystemExit as e:
        # absl's --help (--helpshort, --helpfull, -helpshort, --help=true, -?) prints the
        # usage, then exits 1; asked for, it is a success (`script --help && ...`).
        if e.code == 1 and any(_ASKS_FOR_HELP.fullmatch(arg) for arg in argv[1:]):
            sys.exit(0)
        raise


_ASKS_FOR_HELP = re.compile(r"--?help(short|full|xml)?(=(?i:true|t|1|yes|y))?|-\?")
