"""The recordings test_ansible_compare.py compares rollout with are what the pinned
ansible-core answers today: ansible-inventory runs again on every case (--list and --graph).

Marked slow (two ansible-inventory processes per case): `pytest tests/unit` leaves it out,
`./dev test` runs it after the unit tier (`pytest -m slow tests/unit`)."""

from __future__ import annotations

import pytest
from ansible_recordings import ansible_inventory_exe, ask_ansible_all, cases, recorded

pytestmark = pytest.mark.slow


def test_ansible_inventory_still_answers_as_recorded() -> None:
    if ansible_inventory_exe() is None:
        pytest.fail("ansible-inventory is not installed (pip install -e '.[dev]')")
    names = cases(refused=False)
    for case, answer in ask_ansible_all(names).items():
        kept = recorded(case)
        assert answer.listing == kept.listing, f"{case}: python tests/unit/ansible_recordings.py"
        assert answer.graph == kept.graph, f"{case}: python tests/unit/ansible_recordings.py"
