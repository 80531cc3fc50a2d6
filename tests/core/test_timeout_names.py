"""One timeout vocabulary: time limits we name are ``*_timeout_s``, in seconds. The
user-facing names that were different still work, with a warning, and mean the same."""

from __future__ import annotations

import pytest

from toolgym.plugins.swe.env import SWEEnv
from toolgym.sandboxes.remote.multihost import MultiHostDockerBackend

HOST = "tcp://127.0.0.1:9=2"  # never contacted: nothing is acquired


def test_docker_hosts_acquire_timeout_s() -> None:
    assert MultiHostDockerBackend(HOST).acquire_timeout_s == 600.0
    assert MultiHostDockerBackend(HOST, acquire_timeout_s=5).acquire_timeout_s == 5
    with pytest.warns(FutureWarning, match="wait_s is deprecated: write acquire_timeout_s"):
        assert MultiHostDockerBackend(HOST, wait_s=7).acquire_timeout_s == 7


def test_swe_test_timeout_s() -> None:
    assert SWEEnv().test_timeout_s == 900.0
    assert SWEEnv(test_timeout_s="300").test_timeout_s == 300.0  # as --env-arg gives it
    with pytest.warns(FutureWarning, match="test_timeout is deprecated: write test_timeout_s"):
        assert SWEEnv(test_timeout="120").test_timeout_s == 120.0
