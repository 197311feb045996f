from __future__ import annotations

from pathlib import Path

import pytest

from fleet.agent.config import AgentConfigError, load_agent_config, parse_agent_config
from fleet.agent.supervisor import spec_for

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "rig.example.toml"

MINIMAL = """
[control_plane]
url = "http://127.0.0.1:8000"
token = "ocsrig-aaaaaaaaaa-{secret}"
[rig]
name = "rig1"
address = "127.0.0.1"
"""


def test_the_documented_example_is_a_valid_config_for_two_four_gpu_workers(tmp_path: Path) -> None:
    (tmp_path / "rig.toml").write_text(EXAMPLE.read_text())
    (tmp_path / "rig.token").write_text("ocsrig-token-from-file\n")
    config = load_agent_config(tmp_path / "rig.toml")
    assert config.token == "ocsrig-token-from-file"
    assert (config.rig_name, config.address, config.heartbeat_s) == ("rig1", "100.64.0.12", 5.0)
    a, b = config.workers
    assert (a.gpus, b.gpus) == ((0, 1, 2, 3), (4, 5, 6, 7))
    assert (a.pool, b.pool) == ("production", "dev")
    command = spec_for(b, host=config.address).command(Path("/opt/ocs/llama-server"))
    joined = " ".join(command)
    for expected in ["--host 100.64.0.12", "--port 8081", "--parallel 2", "--ctx-size 65536", "--split-mode layer",
                     "--rope-scaling yarn", "--rope-scale 2", "--yarn-orig-ctx 32768", "--model-draft", "--alias "
                     "qwen2.5-coder-7b", "--n-gpu-layers 99"]:
        assert expected in joined, expected
    assert "--tensor-split 1,1,1,1" in " ".join(spec_for(a, host=config.address).command(Path("x")))
    assert b.launch_summary()["rope_scaling"] == "yarn" and "tensor_split" not in b.launch_summary()
    assert a.launch_summary()["tensor_split"] == [1.0, 1.0, 1.0, 1.0]
    assert a.launch_summary()["extra_args"][:2] == ["--cache-type-k", "q8_0"]
    assert (a.lane_tokens, b.lane_tokens) == (0, 0)  # the example shows lane_tokens commented out


@pytest.mark.parametrize(
    ("workers", "message"),
    [
        ('[[workers]]\nname="a"\nmodel_id="m"\nport=1\ngpus=[0,1]\n[[workers]]\nname="b"\nmodel_id="m"\nport=2\n'
         'gpus=[1]', "a GPU is given to two workers"),
        ('[[workers]]\nname="a"\nmodel_id="m"\nport=1\n[[workers]]\nname="b"\nmodel_id="m"\nport=1',
         "same port"),
        ('[[workers]]\nname="a"\nmodel_id="m"\nport=1\nsplit_mode="diagonal"', "split_mode"),
        ('[[workers]]\nname="a"\nmodel_id="m"\nport=1\ngpus=[0,1]\ntensor_split=[1]', "one share per GPU"),
        ('[[workers]]\nname="a"\nport=1', "`model_id` is required"),
        ('[[workers]]\nname="a"\nmodel_id="m"\nport="8080"', "`port` has the wrong type"),
        ('[[workers]]\nname="a"\nmodel_id="m"\nport=1\nlane_tokens=-5', "`lane_tokens` must be 0"),
    ],
)
def test_invalid_configs_are_refused_with_a_message_saying_where(workers: str, message: str) -> None:
    with pytest.raises(AgentConfigError, match=message):
        parse_agent_config(MINIMAL + workers)


def test_a_config_without_any_token_is_refused() -> None:
    text = MINIMAL.replace('token = "ocsrig-aaaaaaaaaa-{secret}"\n', "")
    with pytest.raises(AgentConfigError, match="token_file"):
        parse_agent_config(text)


@pytest.mark.parametrize("url", ["http://ai.school.example", "http://100.64.0.1:8000", "http://10.0.0.5"])
def test_plain_http_to_another_machine_is_refused_because_the_token_would_travel_in_clear(url: str) -> None:
    with pytest.raises(AgentConfigError, match="in clear"):
        parse_agent_config(MINIMAL.replace("http://127.0.0.1:8000", url))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000",
                                 "https://ai.school.example", "https://100.64.0.1"])
def test_https_anywhere_and_http_on_loopback_are_accepted(url: str) -> None:
    assert parse_agent_config(MINIMAL.replace("http://127.0.0.1:8000", url)).control_plane_url == url


def test_a_ca_file_is_read_relative_to_the_config_and_a_missing_one_is_refused(tmp_path: Path) -> None:
    from tests.deploy.proxy import make_certificate

    cert, _ = make_certificate(tmp_path)
    text = MINIMAL.replace("[rig]", f'ca_file = "{cert.name}"\n[rig]')
    assert load_agent_config_text(tmp_path, text).ca_file == str(cert)
    with pytest.raises(AgentConfigError, match="ca_file"):
        load_agent_config_text(tmp_path, text.replace(cert.name, "missing.pem"))
    (tmp_path / "not-a-cert.pem").write_text("hello")
    with pytest.raises(AgentConfigError, match="ca_file"):
        load_agent_config_text(tmp_path, text.replace(cert.name, "not-a-cert.pem"))


def load_agent_config_text(directory: Path, text: str):  # noqa: ANN201
    (directory / "rig.toml").write_text(text)
    return load_agent_config(directory / "rig.toml")


def test_the_example_leaves_the_binary_to_the_virtual_environment_as_the_guide_says(tmp_path: Path) -> None:
    (tmp_path / "rig.toml").write_text(EXAMPLE.read_text())
    (tmp_path / "rig.token").write_text("ocsrig-token\n")
    assert load_agent_config(tmp_path / "rig.toml").llama_server is None
    assert "Leave `[llama_server] binary` out" in (EXAMPLE.parents[0] / "deployment.md").read_text()


def test_slot_files_have_a_budget_per_worker_from_the_config() -> None:
    assert parse_agent_config(MINIMAL).slot_files_gb == 16.0
    assert parse_agent_config(MINIMAL.replace("[rig]", "[llama_server]\nslot_files_gb = 2.5\n[rig]")).slot_files_gb == 2.5
    with pytest.raises(AgentConfigError, match="slot_files_gb"):
        parse_agent_config(MINIMAL.replace("[rig]", "[llama_server]\nslot_files_gb = 0\n[rig]"))
