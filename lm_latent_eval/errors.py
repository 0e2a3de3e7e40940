"""Errors whose message is the whole story: a mistake in what the user gave us (a file, a model_arg, an option).

``lm-latent-eval`` prints such an error (and any ``OSError``: the message names the file) as one line and exits with
status 2. ``lm_eval`` owns its command line, so our backends install ``excepthook``, which prints these errors, and
only these, as one line (the interpreter still exits with status 1); every other exception keeps its traceback,
because it may be a bug. Each class also derives from the built-in type a caller would catch.
"""

from __future__ import annotations

import sys


class UserError(Exception):
    """A mistake in the user's input, explained completely by its message (no traceback needed)."""


class InputError(UserError, ValueError):
    """A bad value in the user's input: a file's content, an option, a model_arg."""


class MissingFileError(UserError, FileNotFoundError):
    """A file or folder the user named does not exist."""


class UnsupportedError(UserError, TypeError, ValueError):
    """The model cannot do what was asked (e.g. SMC for a model without the stepwise part, the exact estimator for a
    model without ``log_marginal``): a TypeError (the model lacks a method) and a ValueError (a setting it refuses)."""


def one_line(err: BaseException) -> str:
    """The message of ``err`` on one line (an OSError without its errno prefix)."""
    if isinstance(err, OSError) and not isinstance(err, UserError) and err.strerror and err.filename:
        message = f"{err.filename}: {err.strerror}"
    else:
        message = str(err) or type(err).__name__
    return " ".join(message.split())


def excepthook(kind, value, traceback, previous=None, interrupt_hint: str | None = None) -> None:
    """``sys.excepthook`` that prints a UserError as ``lm_eval: error: <message>``, a KeyboardInterrupt as
    ``lm_eval: interrupted; <interrupt_hint>`` where a hint is set (how to resume the run), and hands every other
    exception to ``previous`` (the hook that was installed before)."""
    if isinstance(value, UserError):
        print(f"{_program()}: error: {one_line(value)}", file=sys.stderr)
        return
    if isinstance(value, KeyboardInterrupt) and interrupt_hint:
        # on a line of its own: a Ctrl-C usually lands in the middle of a progress bar's line
        print(f"\n{_program()}: interrupted; {interrupt_hint}", file=sys.stderr)
        return
    (previous or sys.__excepthook__)(kind, value, traceback)


def install_excepthook(interrupt_hint: str | None = None) -> None:
    """Make ``excepthook`` the process's hook, once (the previous one handles every exception that is not ours);
    ``interrupt_hint``: what a Ctrl-C prints after "interrupted;" (the last backend built sets it)."""
    if not getattr(sys.excepthook, "lm_latent_eval", False):
        previous = sys.excepthook

        def hook(kind, value, traceback):
            excepthook(kind, value, traceback, previous, hook.interrupt_hint)

        hook.lm_latent_eval = True
        sys.excepthook = hook
    sys.excepthook.interrupt_hint = interrupt_hint


def running_lm_eval() -> bool:
    """Whether this process is lm-eval's command line (``lm_eval ...`` or ``python -m lm_eval ...``), whose
    process-wide settings (the excepthook) the backend may make its own; a user's script keeps its own."""
    return _program() == "lm_eval"


def _program() -> str:
    """``lm_eval`` for ``python -m lm_eval`` and the ``lm_eval`` script, else the script's name."""
    script = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    return "lm_eval" if "lm_eval" in script or "lm-eval" in script else script.rsplit("/", 1)[-1]
