"""The test suite's own set-up: what keeps it fast and correct on two cores."""

from __future__ import annotations

import pytest


@pytest.mark.xdist_group("suite-self-check")
def test_xdist_groups_reach_the_scheduler(request):
    """Tests that share a resource (conftest.RESOURCE_GROUPS, per-seed campaigns) rely on
    ``--dist loadgroup``; with pytest 9.2 pytest-xdist 3.8 drops the groups without a word
    (pytest-dev/pytest-xdist#1386) and those tests would run on two workers at once."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by a pytest-xdist worker under --dist loadgroup")
    assert request.node.nodeid.endswith("@suite-self-check"), request.node.nodeid
