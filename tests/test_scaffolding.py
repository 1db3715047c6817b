"""The test suite's own settings: hypothesis profiles (DESIGN §6)."""

import pytest
from hypothesis import settings


@pytest.mark.parametrize("name", ["default", "ci"])
def test_profiles_have_no_deadline(name):
    assert settings.get_profile(name).deadline is None  # numba compiles on first call


def test_ci_profile_is_derandomized_and_larger():
    # the default profile's derandomize is hypothesis's own choice: on when it detects a CI
    # service (the CI environment variable), off otherwise; the ci profile always fixes it
    ci, default = settings.get_profile("ci"), settings.get_profile("default")
    assert ci.derandomize
    assert ci.max_examples > default.max_examples
