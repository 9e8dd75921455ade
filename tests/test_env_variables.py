"""env/variables.py: which environment variables a run records (issue 29)."""

from __future__ import annotations

import pytest

from pytest_gpucomm.env.variables import EnvNamesError, is_secret, parse_env_names, recorded_environment


@pytest.mark.parametrize("name", ["AWS_SECRET_ACCESS_KEY", "HF_TOKEN", "WANDB_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD",
                                  "NCCL_NET_AUTH", "MY_APIKEY", "GOOGLE_APPLICATION_CREDENTIALS", "SSH_PRIVATE",
                                  "UCX_SECRET", "FI_PASSWD", "CUDA_API_TOKENS", "session_cookie"])
def test_a_name_that_says_it_holds_a_secret_is_a_secret(name):
    assert is_secret(name)


@pytest.mark.parametrize("name", ["NCCL_IB_PKEY", "NCCL_ALGO", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES",
                                  "FI_PROVIDER", "NCCL_SOCKET_IFNAME", "UCX_TLS", "HSA_FORCE_FINE_GRAIN_PCIE",
                                  "TORCH_NCCL_BLOCKING_WAIT"])
def test_a_setting_is_not_a_secret(name):
    assert not is_secret(name)


def test_the_rule_reads_names_only_and_errs_towards_leaving_a_value_out():
    assert is_secret("MONKEY_THREADS")  # a part ending in KEY: left out, though no secret


def test_the_communication_and_thread_variables_are_recorded_and_nothing_else():
    env = {"NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1",
           "TORCH_HOME": "/x", "HOME": "/root", "PATH": "/bin", "GLOO_SOCKET_IFNAME": "lo", "FI_PROVIDER": "efa",
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "CUDA_VISIBLE_DEVICES": "0"}
    assert recorded_environment(env) == {
        "CUDA_VISIBLE_DEVICES": "0", "FI_PROVIDER": "efa", "GLOO_SOCKET_IFNAME": "lo", "MKL_NUM_THREADS": "1",
        "NCCL_ALGO": "Ring", "OMP_NUM_THREADS": "2", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_a_secret_is_never_recorded_even_when_its_prefix_or_a_user_pattern_asks_for_it():
    env = {"NCCL_NET_AUTH_TOKEN": "s3cr3t", "UCX_SECRET": "x", "MY_FABRIC_MODE": "fast", "MY_FABRIC_API_KEY": "k",
           "HF_TOKEN": "t"}
    got = recorded_environment(env, extra=("MY_FABRIC_*", "HF_TOKEN"))
    assert got == {"MY_FABRIC_MODE": "fast"}
    assert "s3cr3t" not in repr(got)


def test_names_a_user_adds_are_read_from_commas_and_spaces_and_a_bad_one_is_named_with_its_source():
    assert parse_env_names("A_B, MY_*  C", "--gpucomm-env") == ("A_B", "MY_*", "C")
    assert parse_env_names(["X", "X,Y"], "ini gpucomm_env") == ("X", "Y")
    with pytest.raises(EnvNamesError) as e:
        parse_env_names("GOOD,BAD-NAME", "the GPUCOMM_ENV environment variable")
    assert str(e.value).startswith("invalid environment variable name 'BAD-NAME' (from the GPUCOMM_ENV environment "
                                   "variable)")
