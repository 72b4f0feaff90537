"""Turn rollout's typed errors into a clear message and the exit code they promise."""

from __future__ import annotations

import functools
import sys
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

from invoke.exceptions import Exit

from rollout.errors import RolloutError, UserError
from rollout.output.escape import control_escaped, report_text
from rollout.secrets import redact

F = TypeVar("F", bound=Callable[..., Any])


def reports_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except UserError as e:
            raise Exit(report_text(redact(f"error: {e}")), e.exit_code) from e
        except RolloutError as e:
            raise Exit(report_text(redact(f"error: {e}")), e.exit_code) from e
        except KeyboardInterrupt:
            raise Exit("interrupted", 130) from None
        except (Exit, BrokenPipeError):  # a pipe's reader that left: main() ends quietly
            raise
        except Exception as e:  # a bug in rollout: say so, with the trace
            raise Exit(internal_error(e), 70) from e

    return wrapper  # type: ignore[return-value]


def internal_error(e: BaseException) -> str:
    """A bug's trace (on stderr) and message: secrets masked and control characters escaped,
    as any value may be in them (a host's answer, a --set secret)."""
    trace = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    sys.stderr.write(report_text(redact(trace)))
    return control_escaped(redact(f"internal error (a bug in rollout, please report it): {e}"))

