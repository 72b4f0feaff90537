"""What a release must carry for the playbook: the daemon the supervisor starts and every
executable of the release that the validation command runs. A bundle (`--release`) that lacks
one is refused while the plan is made, before any host is locked or changed."""

from __future__ import annotations

import shlex

from rollout.config.render import Command
from rollout.engine.plan import Plan
from rollout.errors import RolloutError, UserError
from rollout.host.layout import Layout
from rollout.steps.decision import Release, Target
from rollout.steps.validate import validation_command

DAEMON = "cuzk-daemon"  # the supervisor starts <root>/current/cuzk-daemon


def _validate_template(plan: Plan, name: str) -> Command:
    """The validate step's command (a string or an argv list), else validate.command."""
    settings = plan.settings_for(name)
    step = next((s for s in plan.host_steps if s.kind == "validate"), None)
    command = (step.params or {}).get("command") if step is not None else None
    if isinstance(command, str | list) and command:
        return command
    default: Command = settings.validation.command
    return default


def release_programs(plan: Plan, name: str, release: Release) -> list[str]:
    """The executables of `release` that host `name`'s validation command runs (words of
    the rendered command under the release's folder)."""
    layout = Layout(plan.root)
    target = Target(plan.host(name), layout, plan.settings_for(name), release)
    try:
        words = shlex.split(validation_command(target, _validate_template(plan, name),
                                               release.id))
    except (RolloutError, ValueError):
        return []  # a bad template fails where it is checked at load, with its line
    folder = layout.release_dir(release.id) + "/"
    return [w.removeprefix(folder) for w in words if w.startswith(folder)]


def needed_executables(plan: Plan, release: Release) -> dict[str, str]:
    """Each executable the playbook needs from `release`, and what needs it."""
    needed = {DAEMON: "the supervisor starts as the daemon"}
    for name in plan.host_names:
        for program in release_programs(plan, name, release):
            needed.setdefault(program, f"the validation command runs (host {name})")
    return needed


def refuse_incomplete(plan: Plan, release: Release, ref: str) -> None:
    """UserError (exit 2) naming the bundle and the executable it lacks."""
    have = {a.name for a in release.artifacts}
    missing = {n: why for n, why in needed_executables(plan, release).items() if n not in have}
    if missing:
        lacks = "; ".join(f"{n} (which {why})" for n, why in sorted(missing.items()))
        raise UserError(f"--release {ref}: the bundle of release {release.id} lacks {lacks}; "
                        f"it has {', '.join(sorted(have)) or 'nothing'}. Refused before any "
                        "host is touched")
