"""SIGTERM and Ctrl-C during a pre-training run: answered when they arrive.

The first signal asks the run to save a checkpoint at the end of its loop and exit; a
second Ctrl-C stops without saving. Python runs a signal handler only between TensorFlow
calls, and a loop of `steps_per_loop` steps is one call (orbit runs them in a tf.while_loop,
with or without XLA): minutes on a CPU, during which the handler would say nothing and
Ctrl-Cs would merge into one. So a thread waits on the signal module's wakeup file
descriptor, to which CPython's C-level handler writes the number of every signal that has a
Python handler as it arrives, and answers each at once; the Python-level handler, which
runs later in the main thread, only raises what the thread decided.
"""

import os
import select
import signal
import sys
import threading

INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT (Ctrl-C)
INTERRUPTED_LINE = "interrupted (Ctrl-C)"  # how a script stopped by Ctrl-C ends
_STOP_WATCHING = 0  # written to the wakeup pipe by `uninstall`; no signal has number 0


def wakeup_pipe() -> tuple[int, int]:
    """A non-blocking pipe for signal.set_wakeup_fd: (read end, write end)."""
    ends = os.pipe()
    for end in ends:
        os.set_blocking(end, False)
    return ends


def pass_on(number: int, previous_fd: int | None):
    """A signal read from a wakeup pipe that is not ours to answer, written to the wakeup
    descriptor set before ours (an asyncio loop's), if there was one."""
    if previous_fd not in (None, -1):
        try:
            os.write(previous_fd, bytes([number]))
        except OSError:
            pass


def exit_now(line: str, code: int):
    """Ends the process at once with `line` on stderr, leaving what kill -9 would (every
    output is written atomically; a rerun takes over). Straight to the descriptors, and
    stdout's buffer flushed from a thread: a stalled or closed stdout must not keep the
    process alive."""
    flushing = threading.Thread(target=_flush_stdout, daemon=True)
    flushing.start()
    flushing.join(1.0)
    try:
        os.write(2, (line + "\n").encode())
    except OSError:
        pass
    os._exit(code)


def _flush_stdout():
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


class StopOnSignal:
    """The run's SIGTERM and SIGINT handler: the first signal asks the loop to save a
    checkpoint at its end and exit (`requested`; `signal` says which came first); Ctrl-C
    after that stops, losing the steps since the last checkpoint: at once, exit 130, with
    `exit_at_once` (a script's process), or by KeyboardInterrupt when the main thread is
    back in Python (a notebook's kernel must not exit).

    `install` (main thread only) makes these the process's handlers and starts the thread
    that answers signals while TensorFlow holds the main thread; `uninstall` stops it (the
    caller puts the handlers it had back)."""

    def __init__(self, log, exit_at_once: bool = False):
        self.requested = threading.Event()
        self.signal = None
        self.log = log
        self.exit_at_once = exit_at_once
        self._again = False  # a Ctrl-C came after the first signal
        # Both re-entrant: a signal can interrupt the main thread's handler while it holds
        # one. `_reading` is held while the pipe is read and its signals answered.
        self._lock = threading.RLock()
        self._reading = threading.RLock()
        self._pipe = self._previous_fd = self._thread = None

    def note(self, number: int):
        """One signal, as it arrives. (The line is printed outside the lock: a signal can
        interrupt the handler that prints it, and its own handler must not wait on it.)"""
        with self._lock:
            first = not self.requested.is_set()
            if first:
                self.signal = number
                self.requested.set()
            elif number == signal.SIGINT:
                self._again = True
        if first and number == signal.SIGINT:
            self.log("Ctrl-C: saving a checkpoint at the end of this loop, then stopping "
                     "(Ctrl-C again stops at once, without it)")
        if not first and number == signal.SIGINT and self.exit_at_once:
            # (a rerun resumes from the last checkpoint)
            exit_now(INTERRUPTED_LINE, INTERRUPTED_EXIT_CODE)

    def __call__(self, number, frame=None):
        """The Python-level handler (main thread)."""
        if self._thread is None:
            self.note(number)
        else:
            self._drain()  # the thread may not have read it yet
        if self._again:
            raise KeyboardInterrupt

    # -- the watcher

    def install(self):
        self._pipe = reader, writer = wakeup_pipe()
        self._thread = threading.Thread(target=self._watch, name="electra-signals",
                                        daemon=True)
        self._thread.start()
        self._previous_fd = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
        signal.signal(signal.SIGTERM, self)
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            # (ignored, as a non-interactive shell starts a job put in the background with
            # `&`: Ctrl-C is not this process's, as Python leaves it for the other scripts)
            signal.signal(signal.SIGINT, self)

    def uninstall(self):
        """Stops the watcher; it answers what the pipe holds first. (A signal in the few
        instructions between giving the wakeup descriptor back and the caller restoring its
        handlers goes unanswered: the run has ended by then.)"""
        if self._thread is None:
            return
        signal.set_wakeup_fd(self._previous_fd)
        os.write(self._pipe[1], bytes([_STOP_WATCHING]))
        self._thread.join(timeout=10)
        if not self._thread.is_alive():  # (a watcher stuck printing keeps its pipe)
            for end in self._pipe:
                os.close(end)
        self._thread = None

    def _watch(self):
        poller = select.poll()
        poller.register(self._pipe[0], select.POLLIN)
        while True:
            poller.poll()
            if not self._drain():
                return

    def _drain(self) -> bool:
        """Answers the signals written to the pipe since the last read; False once told to
        stop watching. One reader at a time, and it answers what it read before the other
        may read: the handler, having drained, sees what the thread decided."""
        with self._reading:
            return self._answer_pending()

    def _answer_pending(self) -> bool:
        try:
            numbers = os.read(self._pipe[0], 256)
        except BlockingIOError:  # none
            return True
        for number in numbers:
            if number == _STOP_WATCHING:
                if threading.current_thread() is not self._thread:  # the handler read it
                    os.write(self._pipe[1], bytes([_STOP_WATCHING]))
                return False
            if number in (signal.SIGINT, signal.SIGTERM):
                self.note(number)
            else:
                pass_on(number, self._previous_fd)
        return True
