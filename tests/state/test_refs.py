"""Where a project's cluster tokens live: this machine's files, environment variables, or AWS
Secrets Manager. Secrets Manager is moto's server on loopback (tests/moto_server.py): AWS's
API is faked at the wire, our code and boto3 run for real."""
from __future__ import annotations

import re
import stat

import pytest

from orchestrator.errors import StateError
from orchestrator.state.refs import (
    EnvTokens,
    FileTokens,
    SecretsManagerTokens,
    fingerprint,
    open_tokens,
)
from orchestrator.state.secrets import FileSecrets

from ..moto_server import aws_env, client, moto_server  # noqa: F401 - fixtures

KEY = "clusters/gpu-a"


@pytest.fixture
def local(tmp_path):
    return FileSecrets(tmp_path / "secrets")


@pytest.fixture
def aws(aws_env):  # noqa: F811 - the fixture imported above
    return aws_env


def test_fingerprint_tells_tokens_apart_and_hides_them():
    token = "a" * 64
    assert re.fullmatch(r"sha256:[0-9a-f]{16}", fingerprint(token))
    assert fingerprint(token) == fingerprint(token) != fingerprint("b" * 64)
    assert token[:16] not in fingerprint(token)


@pytest.mark.parametrize("url", ["", "file", "file://"])
def test_file_tokens_stay_on_this_machine(url, local):
    tokens = open_tokens(url, local)
    assert isinstance(tokens, FileTokens) and tokens.scheme == "file"
    assert tokens.ref(KEY) == "file:clusters/gpu-a"
    assert tokens.fetch(KEY) is None
    token = tokens.create(KEY)
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    assert tokens.fetch(KEY) == token == local.read(KEY)
    assert stat.S_IMODE(local.path(KEY).stat().st_mode) == 0o600
    assert tokens.create(KEY) == token  # never overwrites a token a cluster may run with
    tokens.delete(KEY)
    assert tokens.fetch(KEY) is None and not local.path(KEY).exists()
    tokens.delete(KEY)  # gone already: nothing


def test_a_damaged_token_file_names_the_ref_not_the_content(local):
    local.path(KEY).parent.mkdir(parents=True)
    local.path(KEY).write_text("   \n")
    with pytest.raises(StateError) as error:
        FileTokens(local).fetch(KEY)
    assert "file:clusters/gpu-a" in error.value.message and "empty" in error.value.message


def test_env_tokens_map_keys_to_variables(local, monkeypatch):
    tokens = open_tokens("env://ORCHESTRATE_TOKEN_CI_", local)
    assert isinstance(tokens, EnvTokens) and tokens.scheme == "env"
    assert tokens.ref(KEY) == "env://ORCHESTRATE_TOKEN_CI_GPU_A"
    assert tokens.ref("clusters/x.y-z") == "env://ORCHESTRATE_TOKEN_CI_X_Y_Z"
    monkeypatch.delenv("ORCHESTRATE_TOKEN_CI_GPU_A", raising=False)
    assert tokens.fetch(KEY) is None
    with pytest.raises(StateError) as error:
        tokens.create(KEY)
    assert error.value.message.startswith("set ORCHESTRATE_TOKEN_CI_GPU_A ")
    assert "openssl rand -hex 32" in error.value.hint and "CI's secrets" in error.value.hint
    monkeypatch.setenv("ORCHESTRATE_TOKEN_CI_GPU_A", "  s3cret-token\n")
    assert tokens.fetch(KEY) == "s3cret-token" == tokens.create(KEY)
    tokens.delete(KEY)
    assert tokens.fetch(KEY) == "s3cret-token"  # orchestrate never changes the environment


def test_env_prefix_defaults_and_must_be_a_name(local):
    assert open_tokens("env://", local).ref(KEY) == "env://ORCHESTRATE_TOKEN_GPU_A"
    with pytest.raises(StateError) as error:
        open_tokens("env://not-a-name", local)
    assert "env://not-a-name" in error.value.message and "env://ORCHESTRATE_TOKEN_" in \
        error.value.hint


@pytest.mark.parametrize("url", ["env://HOM", "env://AWS_", "env://CI_RAY_", "env://_",
                                 "env://ORCHESTRATE_TOKEN", "env://orchestrate_token_"])
def test_env_references_name_no_other_variable(url, local, monkeypatch):
    """`secrets: env://HOM` with a cluster named `e` read $HOME as the cluster's token (and
    `env://AWS_` with `secret-access-key` would read the AWS secret): every variable an env://
    reference names begins with ORCHESTRATE_TOKEN_."""
    monkeypatch.setenv("HOME", "/root")
    with pytest.raises(StateError) as error:
        open_tokens(url, local)
    assert url in error.value.message and "ORCHESTRATE_TOKEN_" in error.value.message


def test_unknown_schemes_list_the_known_ones(local):
    for url in ("vault://x", "file:///etc/tokens", "aws-sm:/x"):
        with pytest.raises(StateError) as error:
            open_tokens(url, local)
        assert url in error.value.message
        assert all(s in error.value.hint for s in ("file", "env://", "aws-sm://"))


def test_secrets_manager_create_fetch_delete(aws, local):
    tokens = open_tokens("aws-sm://orc/ml/", local)
    assert isinstance(tokens, SecretsManagerTokens) and tokens.scheme == "aws-sm"
    assert tokens.ref(KEY) == "aws-sm://orc/ml/clusters/gpu-a"
    assert tokens.fetch(KEY) is None
    token = tokens.create(KEY)
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    sm = client(aws, "secretsmanager")
    assert sm.get_secret_value(SecretId="orc/ml/clusters/gpu-a")["SecretString"] == token
    assert tokens.fetch(KEY) == token
    assert tokens.create(KEY) == token  # made meanwhile by another runner: that one is kept
    assert not local.path(KEY).exists()  # nothing on this machine
    tokens.delete(KEY)
    assert tokens.fetch(KEY) is None
    tokens.delete(KEY)  # gone already: nothing
    assert tokens.create(KEY) != token  # deleted without recovery: the name is free again


def test_secrets_manager_prefix_gets_its_slash(aws, local):
    assert open_tokens("aws-sm://team/ml", local).ref(KEY) == "aws-sm://team/ml/clusters/gpu-a"
    assert open_tokens("aws-sm://", local).ref(KEY) == "aws-sm://clusters/gpu-a"


def test_secrets_manager_without_credentials_names_the_ref(aws, local, monkeypatch):
    tokens = open_tokens("aws-sm://orc/ml/", local)
    token = tokens.create(KEY)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)
    runner = open_tokens("aws-sm://orc/ml/", local)  # a runner with no AWS identity
    for attempt in (runner.fetch, runner.create, runner.delete):
        with pytest.raises(StateError) as error:
            attempt(KEY)
        assert "aws-sm://orc/ml/clusters/gpu-a" in error.value.message
        assert "no AWS credentials" in error.value.message and token not in str(error.value)


def test_a_secret_that_is_not_a_string_is_refused(aws, local):
    client(aws, "secretsmanager").create_secret(Name="orc/ml/clusters/gpu-a",
                                                SecretBinary=b"\x00\x01")
    with pytest.raises(StateError, match="holds no token"):
        open_tokens("aws-sm://orc/ml/", local).fetch(KEY)
